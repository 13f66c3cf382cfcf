"""Launch validation: a bad grid or a launch mixing devices is a LaunchError naming the problem, on the
first launch and on the cached (fast) path of a launch seen before alike; nothing runs."""

import pytest
import torch
import torch_rbln.dsl as tl
from torch_rbln.dsl import LaunchError

from torch_rbln import dsl as triton


@triton.jit
def scale3(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offsets = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offsets < n
    tl.store(out_ptr + offsets, tl.load(x_ptr + offsets, mask=mask) * 3.0, mask=mask)


BAD_GRIDS = [
    ((-1,), "grid[0] = -1 is out of range"),
    ((1.9,), "grid[0] must be an int, got float 1.9"),
    (("2",), "grid[0] must be an int, got str '2'"),
    ((1, 1, 1, 1), "grid must have 1 to 3 dimensions, got 4"),
    ((2**63,), f"grid[0] = {2**63} is out of range: it must be between 0 and 2147483647"),
    ((1, 65536), "grid[1] = 65536 is out of range: it must be between 0 and 65535"),
    ((2**31 - 1, 2), "has 4294967294 programs, more than 2147483647"),
    ((), "grid must have 1 to 3 dimensions, got 0"),
    ("abc", "grid must be a tuple of 1 to 3 ints"),
    (None, "grid must be a tuple of 1 to 3 ints"),
]


@pytest.mark.parametrize("device", ["cpu", "rbln"])
@pytest.mark.parametrize(("grid", "message"), BAD_GRIDS, ids=[repr(g) for g, _ in BAD_GRIDS])
def test_bad_grids_are_refused_before_and_after_a_cached_launch(device, grid, message):
    x = torch.arange(10, dtype=torch.float32, device=device)
    out = torch.zeros_like(x)
    for _ in range(2):  # the second launch of this signature takes the cached fast path
        scale3[(1,)](x, out, 10, BLOCK=16)
        out.zero_()
        with pytest.raises(LaunchError) as error:
            scale3[grid](x, out, 10, BLOCK=16)
        assert message in str(error.value) and "kernel 'scale3'" in str(error.value)
        assert out.abs().sum().item() == 0  # nothing ran


def test_grid_entries_may_be_any_integer_type():
    import numpy as np

    x = torch.arange(10, dtype=torch.float32)
    out = torch.empty_like(x)
    scale3[(np.int64(1),)](x, out, 10, BLOCK=16)
    scale3[(torch.tensor(1).item(),)](x, out, 10, BLOCK=16)
    scale3[lambda meta: (triton.cdiv(meta["n"], meta["BLOCK"]),)](x, out, 10, BLOCK=4)
    torch.testing.assert_close(out, x * 3, rtol=0, atol=0)


@pytest.mark.parametrize("pair", ["cpu+rbln:0", "rbln:0+rbln:1"])
def test_tensors_of_one_launch_must_share_a_device(pair):
    first, second = pair.split("+")
    x = torch.arange(10, dtype=torch.float32, device=first)
    out = torch.zeros(10, device=second)
    for _ in range(2):
        with pytest.raises(LaunchError, match="all tensors of one launch must be on the same device"):
            scale3[(1,)](x, out, 10, BLOCK=16)
        assert out.abs().sum().item() == 0
    # after a valid launch of the same dtypes on one device, the mixed launch is still refused
    same = torch.zeros(10, device=first)
    scale3[(1,)](x, same, 10, BLOCK=16)
    scale3[(1,)](x, same, 10, BLOCK=16)
    with pytest.raises(LaunchError, match=f"'out_ptr' is on {'rbln:0' if second == 'rbln:0' else second}"):
        scale3[(1,)](x, out, 10, BLOCK=16)

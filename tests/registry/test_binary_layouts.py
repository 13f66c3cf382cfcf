"""Which kernel a binary op's layout takes, and that every layout matches the CPU.

Same-shape operands, a scalar on either side, a contiguous trailing block repeated over the leading
dims (a bias row) and a leading block broadcast over the trailing dims (a column, as in RMSNorm's
`x * rsqrt(mean(x * x, -1, keepdim=True))`) run `binary_dense_kernel` (no per-element index
decomposition); other broadcasts (a middle dim, both sides) and strided operands run
`binary_tiled_kernel` (tiles of the last two dims: no per-element division, and add/sub/mul/div in
specialisations of their own), small and large alike."""

from __future__ import annotations

import pytest
import torch
from torch_rbln.registry import _launch, _ops

import torch_rbln  # noqa: F401
from torch_rbln import registry


@pytest.fixture
def kernels_used(monkeypatch):
    """Names of the elementwise kernels launched through the registry's paths (general and fast)."""
    used: list[str] = []
    launch = _launch.launch

    def spy(kernel, *args, **kwargs):
        used.append(kernel.__name__)
        return launch(kernel, *args, **kwargs)

    monkeypatch.setattr(_launch, "launch", spy)
    unchecked = _launch.unchecked

    def spy_unchecked(kernel, key):  # the fast paths launch kept plans directly
        run = unchecked(kernel, key)
        if run is not None:
            used.append(kernel.__name__)
        return run

    monkeypatch.setattr(_launch, "unchecked", spy_unchecked)
    E = _ops._k("elementwise")
    general = E.binary_kernel

    class GeneralSpy:
        def __getitem__(self, grid):
            used.append("binary_kernel")
            return general[grid]

    monkeypatch.setattr(E, "binary_kernel", GeneralSpy())
    tiled = E.binary_tiled_kernel

    class TiledSpy:  # launched directly when an int needs 64 bits (no kept launch key)
        __name__ = "binary_tiled_kernel"

        def __getitem__(self, grid):
            used.append("binary_tiled_kernel")
            return tiled[grid]

        def __getattr__(self, name):
            return getattr(tiled, name)

    monkeypatch.setattr(E, "binary_tiled_kernel", TiledSpy())
    return used


X = torch.randn(3, 4, 5)
SAME = torch.randn(3, 4, 5)
ROW, BLOCK = torch.linspace(-1, 1, 5), torch.rand(1, 4, 5)
COLUMN, MIDDLE = torch.rand(3, 4, 1), torch.rand(3, 1, 5)
CASES = [
    ("same shape", lambda x: x + _like(x, SAME), "binary_dense_kernel"),
    ("scalar right", lambda x: x * 0.25, "binary_dense_kernel"),
    ("scalar left (rsub)", lambda x: 2.0 - x, "binary_dense_kernel"),
    ("scalar left (div)", lambda x: torch.div(torch.tensor(3.0, device=x.device), x), "binary_dense_kernel"),
    ("bias row right", lambda x: x + _like(x, ROW), "binary_dense_kernel"),
    ("bias row left", lambda x: _like(x, ROW) - x, "binary_dense_kernel"),
    ("trailing block", lambda x: x * _like(x, BLOCK), "binary_dense_kernel"),
    ("comparison with a row", lambda x: x > _like(x, torch.zeros(5)), "binary_dense_kernel"),
    ("column", lambda x: x + _like(x, COLUMN), "binary_dense_kernel"),
    ("column block left", lambda x: _like(x, COLUMN[:, :1]) / x, "binary_dense_kernel"),
    ("row and column", lambda x: (x * _like(x, COLUMN)) + _like(x, ROW), "binary_dense_kernel"),
    ("both sides", lambda x: x + _like(x, COLUMN[:1, :, :]), "binary_tiled_kernel"),
    ("middle dim", lambda x: x + _like(x, MIDDLE), "binary_tiled_kernel"),
    # a transposed operand is read in place, in the order of torch's result layout (registry/_ops.py's
    # output_order), so it takes the dense kernel; a slice with gaps takes the strided one
    ("transposed", lambda x: x.transpose(1, 2) * 2.0 + 1.0, "binary_dense_kernel"),
    ("strided", lambda x: x[:, :, ::2] * 2.0 + 1.0, "binary_tiled_kernel"),
]


def _like(x: torch.Tensor, values: torch.Tensor) -> torch.Tensor:
    return values.to(x.device)


@pytest.mark.parametrize(("label", "fn", "kernel"), CASES, ids=[c[0] for c in CASES])
def test_layout_takes_its_kernel_and_matches_cpu(label, fn, kernel, kernels_used):
    registry.reset_fallback_report()
    result = fn(X.to("rbln"))
    torch.testing.assert_close(result.cpu(), fn(X), atol=1e-6, rtol=1e-6)
    assert kernel in kernels_used and "binary_kernel" not in kernels_used, (label, kernels_used)
    assert sum(row["cpu"] for row in registry.fallback_report().values()) == 0


LARGE = torch.randn(2, 16, 8, 64, generator=torch.Generator().manual_seed(1))  # batch, seq, heads, dim
COS = torch.randn(1, 1, 16, 64, generator=torch.Generator().manual_seed(2))
LARGE_CASES = [
    # Llama's RoPE: q permuted from (batch, seq, heads, dim), times a cos broadcast over batch and heads
    ("rope", lambda x: x.permute(0, 2, 1, 3) * _like(x, COS), torch.float32),
    ("middle dim", lambda x: x + _like(x, LARGE[:, :1]), torch.float32),
    ("both sides", lambda x: _like(x, LARGE[:1, :, :, :1]) - x[:, :1], torch.float32),
    ("strided", lambda x: x[:, :, ::2] / (x[:, :, 1::2] + 3.0), torch.float32),
    ("alpha", lambda x: torch.add(x[:, :, ::2], x[:, :, 1::2], alpha=-2.5), torch.float32),
    ("comparison", lambda x: x.permute(0, 2, 1, 3) >= _like(x, COS), torch.float32),
    ("pow", lambda x: torch.pow(x.permute(0, 2, 1, 3).abs(), _like(x, COS)), torch.float32),
    ("half", lambda x: x.permute(0, 2, 1, 3) * _like(x, COS.half()), torch.float16),
]


@pytest.mark.parametrize(("label", "fn", "dtype"), LARGE_CASES, ids=[c[0] for c in LARGE_CASES])
def test_a_large_broadcast_or_strided_layout_takes_the_tiled_kernel_and_matches_cpu(label, fn, dtype,
                                                                                     kernels_used):
    registry.reset_fallback_report()
    x = LARGE.to(dtype)
    result = fn(x.to("rbln"))
    expected = fn(x)
    assert result.shape == expected.shape and result.dtype == expected.dtype
    rtol = 1e-6 if dtype is torch.float32 else 1e-3
    torch.testing.assert_close(result.cpu(), expected, atol=1e-6, rtol=rtol, equal_nan=True)
    assert "binary_tiled_kernel" in kernels_used and "binary_kernel" not in kernels_used, kernels_used
    assert sum(row["cpu"] for row in registry.fallback_report().values()) == 0


HALF_SCALAR_OPS = [
    # the scalar rounded to the tensor's dtype first
    lambda t: t + 1e-3, lambda t: t - 0.3, lambda t: 0.3 - t, lambda t: t.clone().add_(1e-3),
    lambda t: t == 0.1, lambda t: t < 0.1, lambda t: torch.where(t > 0, t, 0.1),
    # the scalar at full precision
    lambda t: t * 0.1, lambda t: t / 0.3, lambda t: 0.3 / t, lambda t: t.clone().mul_(3.3),
    lambda t: torch.div(t * 4, 0.3, rounding_mode="trunc"),
    lambda t: torch.div(t * 4, 0.3, rounding_mode="floor"),
]


# bfloat16 runs the same code with another rounding and ~35 s of cold compiles: slow
@pytest.mark.parametrize("dtype", [torch.float16, pytest.param(torch.bfloat16, marks=pytest.mark.slow)])
def test_a_scalar_operand_takes_part_as_torch_uses_it(dtype):
    """torch rounds a scalar to the tensor's half dtype for add/sub/comparisons/where, but mul and div
    read it at full precision: results are bitwise those of the CPU."""
    x = torch.randn(4096, generator=torch.Generator().manual_seed(0)).to(dtype)
    for fn in HALF_SCALAR_OPS:
        torch.testing.assert_close(fn(x.to("rbln")).cpu(), fn(x), atol=0, rtol=0)


def test_in_place_bias_add_on_a_view_of_rows():
    x = torch.randn(6, 8)
    bias = torch.randn(8)
    d = x.to("rbln")
    d[2:5].add_(bias.to("rbln"))
    expected = x.clone()
    expected[2:5].add_(bias)
    torch.testing.assert_close(d.cpu(), expected)


def test_small_tiled_launches_share_four_tile_shapes():
    """Below 4096 elements a tiled binary or where launch takes one of four tiles, whatever its sizes
    (each tile is a specialisation); from 4096 on the tile follows the sizes (`tile_shape`)."""
    from torch_rbln.registry.elementwise import binary_tiled_launch, where_launch
    from torch_rbln.registry.geometry import tile_shape

    dtypes = (torch.float32, torch.float32, torch.float32)
    small = set()
    layouts = [(1, 1, 5), (1, 1, 3000), (3, 4, 5), (2, 7, 33), (1, 60, 60), (4, 16, 16), (1, 2, 1000)]
    for s1, s2, s3 in layouts:
        n = s1 * s2 * s3
        strides = [0, s2 * s3, s3, 1]
        for launch in (binary_tiled_launch("add", dtypes, n, [s1, s2, s3], strides, strides),
                       where_launch((torch.bool, *dtypes), n, [s1, s2, s3], strides, strides, strides)):
            tile = launch.keywords["BLOCK_M"], launch.keywords["BLOCK_N"]
            small.add(tile)
            assert launch.programs * launch.rows * tile[0] * tile[1] >= n
    assert small <= {(1, 16), (1, 1024), (64, 16), (16, 64)}, small
    large = binary_tiled_launch("mul", dtypes, 8 * 96 * 80, [8, 96, 80], [0, 7680, 80, 1], [0, 0, 80, 1])
    assert (large.keywords["BLOCK_M"], large.keywords["BLOCK_N"]) == tile_shape(96, 80)


@pytest.mark.parametrize("backend", ["numba", "interpret"])
def test_the_flat_kernel_of_huge_dense_outputs_matches_cpu(backend):
    """`binary_kernel` serves only dense operands of 2^31+ elements (`binary_dense_kernel` declines
    those); its one-element-per-lane code, launched here directly on a small dense pair with the last
    block partly masked, gives the CPU's values for add and (on the interpreter, which compiles
    nothing) floor division."""
    from torch_rbln.kernels import elementwise as E

    g = torch.Generator().manual_seed(4)
    a, b = torch.randn(1000, generator=g), torch.rand(1000, generator=g) + 0.5
    cases = [("add", a + 2.0 * b)]
    if backend == "interpret":
        cases.append(("div_floor", torch.div(a, b, rounding_mode="floor")))
    for name, expected in cases:
        op = E.BINARY[name]
        out = torch.full((1000,), 7.0)
        E.binary_kernel[(4,)](a, b, out, 1000, 2.0, OP=op, BLOCK=256, backend=backend)
        torch.testing.assert_close(out, expected, rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize("op", [torch.add, torch.div, torch.maximum, torch.pow, torch.eq],
                         ids=lambda f: f.__name__)
def test_a_zero_dim_operand_of_another_float_type_does_not_promote_a_transposed_tensor(op):
    """A 0-dim tensor takes part in type promotion only by category (bfloat16 + a float16 0-dim tensor
    is bfloat16). A transposed operand is computed in its own dim order, and the 0-dim tensor once
    went into that order reshaped to two dims: float32 came out."""
    x = torch.rand(5, 3).bfloat16() + 0.5
    scalar = torch.tensor(1.5, dtype=torch.float16)
    transposed = x.t().contiguous().to("rbln").t()  # x's values, column-major
    got = op(transposed, scalar.to("rbln"))
    want = op(x, scalar)
    assert got.dtype == want.dtype
    torch.testing.assert_close(got.cpu(), want, atol=1e-2, rtol=1e-2)


ZERO_DIM_OPS = {
    "add": torch.add, "sub": torch.sub, "mul": torch.mul, "div": torch.div, "maximum": torch.maximum,
    "gt": torch.gt, "where": lambda x, s: torch.where(x > 0, x, s), "floor_div": lambda x, s: torch.div(
        x, s, rounding_mode="floor"), "trunc_div": lambda x, s: torch.div(x, s, rounding_mode="trunc"),
    "scalar_first_mul": lambda x, s: torch.mul(s, x), "scalar_first_div": lambda x, s: torch.div(s, x),
    "scalar_first_sub": lambda x, s: torch.sub(s, x),
}


@pytest.mark.parametrize("scalar_dtype", [torch.float32, torch.float64, torch.bfloat16],
                         ids=lambda d: str(d).replace("torch.", ""))
@pytest.mark.parametrize("op", list(ZERO_DIM_OPS))
def test_a_zero_dim_tensor_operand_is_used_as_the_cpu_uses_it(op, scalar_dtype):
    """A 0-dim tensor next to a bfloat16 tensor, on rbln or on the CPU, gives the CPU's bits: torch's CPU
    kernels round such a scalar to bfloat16 first, except as the second operand of mul and div, which
    read it unrounded, and a truncating division by it does not round the quotient (it once was
    read unrounded everywhere on rbln, and a 0-dim rbln divisor took the tensor rule)."""
    x = (torch.randn(2048, generator=torch.Generator().manual_seed(3)) * 50).bfloat16()
    scalar = torch.tensor(1.2345678, dtype=scalar_dtype)
    want = ZERO_DIM_OPS[op](x, scalar)
    for _ in range(2):  # the checked implementation, then the signature's plan
        for operand in (scalar.to("rbln"), scalar):
            got = ZERO_DIM_OPS[op](x.to("rbln"), operand).cpu()
            assert got.dtype == want.dtype and torch.equal(got, want), (operand.device, op)

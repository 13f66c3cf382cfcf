"""A kernel's compiled code does not depend on where its source file lives.

The generated module's text is its cache identity (`codegen.Lowered.digest`, numba's cache beside it),
so nothing in it may name a directory: the op library installed in a second venv or checkout, a compiled
graph's kernels (whose DSL source lives in the cache directory) and a cache copied to other hosts for
`rbln-autotune precompile` must find the machine code already compiled."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import torch
from torch_rbln.dsl.backends.numba_backend import codegen, executable

KERNEL = '''
import torch_rbln.dsl as tl


@tl.jit
def portable_twice_kernel(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offsets = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offsets < n
    tl.store(out_ptr + offsets, tl.load(x_ptr + offsets, mask=mask) * 2.0 + 0.25, mask=mask)
'''


def _install(root: Path, name: str):
    """The kernel as if installed under `root` (its own file, its own module object)."""
    path = root / "site-packages" / "my_kernels.py"
    path.parent.mkdir(parents=True)
    path.write_text(KERNEL)
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.portable_twice_kernel


def test_one_kernel_installed_at_two_paths_lowers_to_one_module(tmp_path):
    lowered = []
    for place in ("venv_a", "elsewhere/venv_b"):
        kernel = _install(tmp_path / place, f"portable_lowering_{place.replace('/', '_')}")
        x = torch.randn(10)
        lowered.append(codegen.lower(kernel.warmup(x, torch.empty(10), 10, BLOCK=16, grid=(1,)).ir))
    first, second = lowered
    assert first.digest == second.digest and first.source == second.source
    assert str(tmp_path) not in first.source
    assert "# Source: my_kernels.py:" in first.source  # the file and line still say where it came from


def test_a_second_install_launches_the_machine_code_the_first_compiled(tmp_path):
    x = torch.randn(37)
    expected = x * 2.0 + 0.25
    outputs = []
    for place in ("checkout", "venv/lib"):
        kernel = _install(tmp_path / place, f"portable_launch_{place.replace('/', '_')}")
        before = executable.compile_count()[0]
        out = torch.empty(37)
        kernel[(3,)](x, out, 37, BLOCK=16)
        outputs.append((out, executable.compile_count()[0] - before))
    (first, _), (second, compiled) = outputs
    torch.testing.assert_close(first, expected, atol=0, rtol=0)
    torch.testing.assert_close(second, expected, atol=0, rtol=0)
    assert compiled == 0, "the second install compiled the kernel again"

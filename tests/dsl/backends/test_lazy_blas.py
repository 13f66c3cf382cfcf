"""`lazy_blas.py`: a process whose kernels never multiply matrices does not import scipy.linalg (numba's
BLAS check at target set-up is deferred); a 2-D `tl.dot` kernel does not either where `dot_support`
binds torch's BLAS (its staged tiles take that gemm too, not numba's `np.dot`), and gets the right
products, cold (compiled) and warm (loaded from numba's cache)."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

SCRIPT = textwrap.dedent('''
    import sys
    import torch
    import torch_rbln.dsl as tl


    @tl.jit
    def add_one(x, out, n, BLOCK: tl.constexpr):
        offs = tl.arange(0, BLOCK)
        m = offs < n
        tl.store(out + offs, tl.load(x + offs, mask=m) + 1.0, mask=m)


    @tl.jit
    def product(a, b, c, N: tl.constexpr):
        r = tl.arange(0, N)
        x = tl.load(a + r[:, None] * N + r[None, :])
        y = tl.load(b + r[:, None] * N + r[None, :])
        tl.store(c + r[:, None] * N + r[None, :], tl.dot(x, y))


    x = torch.randn(10)
    out = torch.empty(10)
    add_one[(1,)](x, out, 10, BLOCK=16, backend="numba")
    assert torch.equal(out, x + 1.0)
    import numba.np.arraymath as arraymath
    import numba.np.linalg as linalg
    print("after add:", "scipy.linalg" in sys.modules, arraymath._HAVE_BLAS,
          arraymath.ensure_blas is linalg.ensure_blas)
    a, b = torch.randn(16, 16), torch.randn(16, 16)
    c = torch.empty(16, 16)
    product[(1,)](a, b, c, N=16, backend="numba")
    torch.testing.assert_close(c, a @ b, atol=1e-4, rtol=1e-4)
    half = torch.randn(16, 16, dtype=torch.float16)  # staged: converted to float32 tiles
    product[(1,)](half, half, c, N=16, backend="numba")
    torch.testing.assert_close(c, half.float() @ half.float(), atol=1e-2, rtol=1e-2)
    from torch_rbln.dsl.backends.numba_backend import dot_support
    print("after dot:", "scipy.linalg" in sys.modules, dot_support.GEMM_SOURCE == "scipy")
''')


def test_scipy_linalg_is_imported_only_for_the_first_dot_kernel(tmp_path):
    script = tmp_path / "lazy.py"
    script.write_text(SCRIPT)
    env = dict(os.environ, TORCH_RBLN_CACHE_DIR=str(tmp_path / "cache"), TORCH_RBLN_LOG_LEVEL="ERROR")
    env.pop("TORCH_RBLN_DSL_BACKEND", None)
    for run in ("cold", "warm"):
        done = subprocess.run([sys.executable, str(script)], env=env, capture_output=True, text=True,
                              timeout=900)
        assert done.returncode == 0, (run, done.stderr[-3000:])
        assert "after add: False True True" in done.stdout, (run, done.stdout)
        # scipy.linalg only where gemm is bound to scipy's BLAS
        assert "after dot: True True" in done.stdout or "after dot: False False" in done.stdout, \
            (run, done.stdout)

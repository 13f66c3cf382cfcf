"""Triton's tutorials 01, 02, 03, 05 and 06, unmodified except their imports, on rbln tensors.

The tutorials are read at test time from ``$RBLN_TEST_TRITON_DIR/python/tutorials/`` (a checkout of
triton-lang/triton); the tests skip when the variable is unset.  Each file's `import triton...` lines are
rewritten to import `torch_rbln.dsl` (on the same lines, so kernel error locations stay right), then the
module is executed under a `__name__` other than "__main__", without its module-level `<bench>.run(...)`
calls (the benchmark sweeps go to 2^27 elements; their benchmark functions are still called once below).
Whatever else the tutorial does at module level runs as written, including its own unit test.  Then
each tutorial's host function is compared with torch on CPU.
"""

from __future__ import annotations

import ast
import linecache
import os
import re
from pathlib import Path

import pytest
import torch

_DIR = os.environ.get("RBLN_TEST_TRITON_DIR")
pytestmark = pytest.mark.skipif(
    not _DIR, reason="RBLN_TEST_TRITON_DIR (a triton-lang/triton checkout) is not set"
)

_IMPORT_RULES = [
    # (pattern on a whole line, replacement); longest forms first
    (r"^(\s*)import triton\.language as (\w+)\s*$", r"\1import torch_rbln.dsl as \2"),
    (r"^(\s*)import triton\.([\w.]+) as (\w+)\s*$", r"\1import torch_rbln.dsl.\2 as \3"),
    (
        r"^(\s*)import triton\.([\w.]+)\s*$",
        r"\1import torch_rbln.dsl.\2; from torch_rbln import dsl as triton",
    ),
    (r"^(\s*)import triton\s*$", r"\1from torch_rbln import dsl as triton"),
    (r"^(\s*)from triton\.([\w.]+) import (.+)$", r"\1from torch_rbln.dsl.\2 import \3"),
    (r"^(\s*)from triton import (.+)$", r"\1from torch_rbln.dsl import \2"),
]


def rewrite_imports(src: str) -> str:
    """`src` with each `import triton...` / `from triton... import` line pointed at torch_rbln.dsl."""
    out = []
    for line in src.splitlines(keepends=True):
        body = line.rstrip("\n")
        for pat, rep in _IMPORT_RULES:
            new, n = re.subn(pat, rep, body)
            if n:
                body = new
                break
        out.append(body + ("\n" if line.endswith("\n") else ""))
    return "".join(out)


def _is_bench_run(stmt: ast.stmt) -> bool:
    """A module-level `<name>.run(...)` statement: a perf_report sweep."""
    return (
        isinstance(stmt, ast.Expr)
        and isinstance(stmt.value, ast.Call)
        and isinstance(stmt.value.func, ast.Attribute)
        and stmt.value.func.attr == "run"
    )


def _is_call_of(statement: ast.stmt, name: str) -> bool:
    return (isinstance(statement, ast.Expr) and isinstance(statement.value, ast.Call)
            and isinstance(statement.value.func, ast.Name) and statement.value.func.id == name)


def load_tutorial(name: str, skip_calls: tuple[str, ...] = ()) -> dict:
    """Exec a tutorial with its imports rewritten; module-level benchmark runs and the module-level
    calls named in `skip_calls` are left out (the test makes them itself)."""
    path = Path(_DIR) / "python" / "tutorials" / name
    if not path.exists():
        pytest.skip(f"{path} does not exist")
    src = rewrite_imports(path.read_text())
    filename = f"{path} (imports rewritten)"
    lines = src.splitlines(keepends=True)
    linecache.cache[filename] = (len(src), None, lines, filename)
    tree = ast.parse(src, filename)
    tree.body = [s for s in tree.body
                 if not _is_bench_run(s) and not any(_is_call_of(s, call) for call in skip_calls)]
    ns = {"__name__": "triton_tutorial_" + name.split("-")[0], "__file__": filename}
    exec(compile(tree, filename, "exec"), ns)
    return ns


@pytest.fixture(autouse=True)
def _isolated(tmp_path, monkeypatch):
    monkeypatch.setenv("TORCH_RBLN_AUTOTUNE_DB", str(tmp_path / "autotune.db"))
    monkeypatch.chdir(tmp_path)  # save_path='.' of a benchmark
    torch.manual_seed(0)


def _rbln(t):
    return t.to("rbln")


def test_01_vector_add():
    ns = load_tutorial("01-vector-add.py")
    x, y = torch.rand(5000), torch.rand(5000)
    out = ns["add"](_rbln(x), _rbln(y))
    assert out.device.type == "rbln"
    torch.testing.assert_close(out.cpu(), x + y, rtol=0, atol=0)
    # the tutorial's benchmark function at its smallest x value, through triton.testing.do_bench
    bench = ns["benchmark"]
    gbps = bench.fn(size=bench.benchmarks.x_vals[0], provider="triton")
    assert len(gbps) == 3 and all(v > 0 for v in gbps)


def test_02_fused_softmax():
    ns = load_tutorial("02-fused-softmax.py")
    for shape in [(37, 300), (5, 1024), (1, 3)]:
        x = torch.randn(*shape)
        y = ns["softmax"](_rbln(x))
        torch.testing.assert_close(y.cpu(), torch.softmax(x, dim=1), rtol=1e-5, atol=1e-6)


def test_03_matmul():
    ns = load_tutorial("03-matrix-multiplication.py")
    a = torch.randn(100, 70, dtype=torch.float16)
    b = torch.randn(70, 90, dtype=torch.float16)
    ref = (a.float() @ b.float())
    c = ns["matmul"](_rbln(a), _rbln(b))
    torch.testing.assert_close(c.cpu().float(), ref, atol=2e-2, rtol=2e-3)
    c = ns["matmul"](_rbln(a), _rbln(b), activation="leaky_relu")
    leaky = torch.nn.functional.leaky_relu(ref, 0.01)
    torch.testing.assert_close(c.cpu().float(), leaky, atol=2e-2, rtol=2e-3)
    assert ns["matmul_kernel"].best_config is not None
    # the tutorial's fp8 path (it takes it only when is_cuda()): e5m2 inputs, b transposed, fp16 output
    a8, b8 = a.to(torch.float8_e5m2), b.T.contiguous().T.to(torch.float8_e5m2)
    c8 = ns["matmul"](_rbln(a8), _rbln(b8))
    ref8 = a8.to(torch.float16).float() @ b8.to(torch.float16).float()
    torch.testing.assert_close(c8.cpu().float(), ref8, atol=0.125, rtol=0)


@pytest.mark.slow
def test_03_matmul_cuda_configs():
    """The tutorial picks its HIP config list on a non-CUDA target; its CUDA list (16 configs, blocks up to
    256x256x128) is tuned here over the same kernel, fp16 and with the leaky_relu activation."""
    ns = load_tutorial("03-matrix-multiplication.py")
    kernel = ns["triton"].autotune(configs=ns["get_cuda_autotune_config"](), key=["M", "N", "K"])(
        ns["matmul_kernel"].base_fn
    )
    M, N, K = 96, 80, 200
    a, b = torch.randn(M, K, dtype=torch.float16), torch.randn(K, N, dtype=torch.float16)
    c = torch.empty(M, N, dtype=torch.float16, device="rbln")
    ar, br = _rbln(a), _rbln(b)
    cdiv = ns["triton"].cdiv
    grid = lambda META: (cdiv(M, META["BLOCK_SIZE_M"]) * cdiv(N, META["BLOCK_SIZE_N"]),)  # noqa: E731
    kernel[grid](ar, br, c, M, N, K, ar.stride(0), ar.stride(1), br.stride(0), br.stride(1), c.stride(0),
                 c.stride(1), ACTIVATION="leaky_relu")
    ref = torch.nn.functional.leaky_relu(a.float() @ b.float(), 0.01)
    torch.testing.assert_close(c.cpu().float(), ref, atol=2e-2, rtol=2e-3)
    assert len(kernel.configs_timings or {}) == 16


def test_05_layer_norm_forward_backward():
    """The backward's `if count == 0: ... else: partial_db += ...` (with the atomic_cas lock) was the
    numba if/else stale-value miscompile; tests/dsl/test_miscompiles.py reproduces it in our words.

    The tutorial's own module-level check, `test_layer_norm(1151, 8192, torch.float16)`, compares fp16 dw
    against torch's fp16 layer norm with atol 1e-2, below one fp16 step of its values (|dw| up to 12:
    steps of 0.0078): measured here, our dw is 0.008 from the float32 truth and torch's fp16 dw 0.015,
    2 fp16 steps apart. It is run in float32 (where 1e-2 is meaningful) and fp16 is checked below
    against the float32 truth."""
    ns = load_tutorial("05-layer-norm.py", skip_calls=("test_layer_norm",))
    ns["test_layer_norm"](1151, 1024, torch.float32)
    M, N = 33, 300
    for dtype, tol in [(torch.float32, 1e-4), (torch.float16, 1e-2)]:
        x = (-2.3 + 0.5 * torch.randn(M, N)).to(dtype)
        w, b = torch.rand(N, dtype=dtype), torch.rand(N, dtype=dtype)
        dy = 0.1 * torch.randn(M, N, dtype=dtype)
        xr, wr, br = (_rbln(t).requires_grad_() for t in (x, w, b))
        y = ns["layer_norm"](xr, (N,), wr, br, 1e-5)
        y.backward(_rbln(dy))
        xc, wc, bc = (t.clone().requires_grad_() for t in (x, w, b))
        yc = torch.nn.functional.layer_norm(xc.float(), (N,), wc.float(), bc.float(), 1e-5)
        yc.backward(dy.float())
        torch.testing.assert_close(y.cpu().float(), yc, atol=tol, rtol=0)
        torch.testing.assert_close(xr.grad.cpu().float(), xc.grad.float(), atol=tol, rtol=0)
        torch.testing.assert_close(wr.grad.cpu().float(), wc.grad.float(), atol=tol * 3, rtol=tol)
        torch.testing.assert_close(br.grad.cpu().float(), bc.grad.float(), atol=tol * 3, rtol=tol)


def _attention_ref(q, k, v, causal, sm_scale):
    q, k, v = (t.float().requires_grad_() for t in (q, k, v))
    p = q @ k.transpose(2, 3) * sm_scale
    if causal:
        n = q.shape[2]
        p = p.masked_fill(torch.triu(torch.ones(n, n, dtype=torch.bool), 1), float("-inf"))
    o = torch.softmax(p, dim=-1) @ v
    return o, (q, k, v)


def _load_attention(monkeypatch):
    """06 filters its (CUDA-only) TMA configs at import time with `torch.cuda.get_device_capability()`,
    which raises on a torch without CUDA; the harness answers (0, 0), "no CUDA device", for that call.
    Its kernels and host code are not touched (the TMA path is taken only when is_cuda())."""
    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda *a, **k: (0, 0))
    return load_tutorial("06-fused-attention.py")


@pytest.mark.parametrize("causal", [True, False])
def test_06_fused_attention(causal, monkeypatch):
    ns = _load_attention(monkeypatch)
    Z, H, N_CTX, D = 1, 2, 128, 64
    q, k, v = (torch.empty(Z, H, N_CTX, D, dtype=torch.float16).normal_(0, 0.5) for _ in range(3))
    do = torch.randn(Z, H, N_CTX, D, dtype=torch.float16)
    qr, kr, vr = (_rbln(t).requires_grad_() for t in (q, k, v))
    out = ns["attention"](qr, kr, vr, causal, 0.5)
    ref, leaves = _attention_ref(q, k, v, causal, 0.5)
    torch.testing.assert_close(out.cpu().float(), ref, atol=1e-2, rtol=0)
    if causal:  # the tutorial's backward kernel assumes a causal mask
        out.backward(_rbln(do))
        ref.backward(do.float())
        for got, want in zip((qr, kr, vr), leaves, strict=True):
            torch.testing.assert_close(got.grad.cpu().float(), want.grad, atol=1e-2, rtol=0)


@pytest.mark.slow
def test_06_fused_attention_own_test(monkeypatch):
    """The tutorial's own `test_op` at its own parametrisation (1, 2, 1024, 64, causal)."""
    ns = _load_attention(monkeypatch)
    ns["test_op"](1, 2, 1024, 64, True)

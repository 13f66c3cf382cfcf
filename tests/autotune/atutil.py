"""Tiny kernels and helpers shared by the autotune tests (imported as a top-level module)."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import torch
import torch_rbln.dsl as tl
from torch_rbln.autotune import Config, autotune

from torch_rbln import dsl as triton

BLOCKS = (64, 256, 1024)
FAST = {"warmup": 0.5, "rep": 2.0}


@triton.jit
def add_kernel(x_ptr, y_ptr, out_ptr, n_elements, BLOCK_SIZE: tl.constexpr):
    pid = tl.program_id(axis=0)
    offsets = pid * BLOCK_SIZE + tl.arange(0, BLOCK_SIZE)
    mask = offsets < n_elements
    x = tl.load(x_ptr + offsets, mask=mask)
    y = tl.load(y_ptr + offsets, mask=mask)
    tl.store(out_ptr + offsets, x + y, mask=mask)


@triton.jit
def acc_kernel(x_ptr, out_ptr, n_elements, BLOCK_SIZE: tl.constexpr):
    """out += x (so benchmark runs would accumulate without reset_to_zero / restore_value)."""
    pid = tl.program_id(axis=0)
    offsets = pid * BLOCK_SIZE + tl.arange(0, BLOCK_SIZE)
    mask = offsets < n_elements
    x = tl.load(x_ptr + offsets, mask=mask)
    o = tl.load(out_ptr + offsets, mask=mask)
    tl.store(out_ptr + offsets, o + x, mask=mask)


def configs(blocks=BLOCKS, **extra):
    return [Config({"BLOCK_SIZE": b}, **extra) for b in blocks]


def make_add(blocks=BLOCKS, name="atutil:add", **options):
    """A fresh Autotuner (empty in-process memo) over the shared `add_kernel`."""
    opts = dict(FAST)
    opts.update(options)
    opts.setdefault("key", ["n_elements"])
    return autotune(configs=configs(blocks), name=name, **opts)(add_kernel)


def grid(n):
    return lambda meta: (triton.cdiv(n, meta["BLOCK_SIZE"]),)


def launch_add(kernel, n=1000, dtype=torch.float32, **kw):
    x, y = torch.randn(n, dtype=dtype), torch.randn(n, dtype=dtype)
    out = torch.empty_like(x)
    kernel[grid(n)](x, y, out, n, **kw)
    assert torch.equal(out, x + y)
    return kernel.best_config


REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))


def run_python(code: str, env: dict, cwd=None, timeout=120) -> subprocess.CompletedProcess:
    """Run `code` in a fresh interpreter with only torch-rbln variables from `env` (plus PATH etc.)."""
    full = {k: v for k, v in os.environ.items() if not k.startswith(("TORCH_RBLN_", "RBLN_"))}
    paths = [os.path.dirname(__file__), env.pop("PYTHONPATH", None), full.get("PYTHONPATH")]
    full["PYTHONPATH"] = os.pathsep.join(p for p in paths if p)
    full.update(env)
    return subprocess.run([sys.executable, "-c", textwrap.dedent(code)], env=full, cwd=cwd or REPO,
                          capture_output=True, text=True, timeout=timeout)


# module-level autotuned kernels for the CLI's manifests ("atutil:add_tuned")
add_tuned = make_add(name="atutil:add_tuned", bucket="pow2")


@triton.jit
def broken_kernel(x_ptr, n, BLOCK_SIZE: tl.constexpr):
    tl.store(x_ptr + tl.arange(0, BLOCK_SIZE), missing_name)  # noqa: F821  (every config fails to compile)


broken_tuned = autotune(configs=configs((64, 128)), key=["n"], name="atutil:broken_tuned",
                        **FAST)(broken_kernel)


def manifest(path, kernels):
    """Write a manifest file; `kernels` is the Python form of the JSON document's "kernels" list."""
    import json

    path.write_text(json.dumps({"kernels": kernels}, indent=2))
    return str(path)


def add_launch(sizes=(1000, 3000), dtype="float32"):
    t = {"shape": ["$n"], "dtype": dtype}
    return {"sizes": {"n": list(sizes)}, "args": [t, t, dict(t, init="zeros"), "$n"],
            "grid": ["cdiv(n_elements, BLOCK_SIZE)"]}

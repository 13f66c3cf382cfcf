"""The numba backend's warm index (`warm_index.py`): a process that finds a specialisation's sidecar loads
its generated module without running the DSL front end or the code generator; the key changes with every
input of those two; a damaged, foreign or stale sidecar is ignored with a WARNING and rebuilt; concurrent
writers never leave a torn sidecar."""

from __future__ import annotations

import importlib.util
import json
import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import torch
from torch_rbln.dsl import frontend
from torch_rbln.dsl.backends.numba_backend import codegen, executable, warm_index
from torch_rbln.dsl.errors import KernelRuntimeError
from torch_rbln.dsl.jit import specialize

from torch_rbln import config

KERNELS = '''
import torch_rbln.dsl as tl

SCALE = {scale}


@tl.jit
def helper(x):
    return x * {helper_factor}


@tl.jit
def scale_kernel(x, out, n, BLOCK: tl.constexpr):
    pid = tl.program_id(0)
    offs = pid * BLOCK + tl.arange(0, BLOCK)
    m = offs < n
    tl.store(out + offs, helper(tl.load(x + offs, mask=m)) * SCALE{extra}, mask=m)


@tl.jit
def unmasked_store(out, BLOCK: tl.constexpr):
    tl.store(out + tl.arange(0, BLOCK), 1.0)
'''


def _module(tmp_path: Path, name: str = "warm_kernels", prefix: str = "", scale: float = 2.0,
            helper_factor: float = 1.0, extra: str = ""):
    """A fresh import of KERNELS from a file (the front end needs a kernel's source file)."""
    path = tmp_path / f"{name}.py"
    path.write_text(prefix + KERNELS.format(scale=scale, helper_factor=helper_factor, extra=extra))
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture
def counted(monkeypatch):
    """How often the front end and the code generator ran."""
    counts = {"frontend": 0, "lower": 0}
    real_frontend, real_lower = frontend.compile_kernel, codegen.lower

    def compile_kernel(*args, **kwargs):
        counts["frontend"] += 1
        return real_frontend(*args, **kwargs)

    def lower(*args, **kwargs):
        counts["lower"] += 1
        return real_lower(*args, **kwargs)

    monkeypatch.setattr(frontend, "compile_kernel", compile_kernel)
    monkeypatch.setattr(codegen, "lower", lower)
    return counts


def _launch(kernels, n: int = 100) -> tuple[torch.Tensor, torch.Tensor]:
    x = torch.randn(n)
    out = torch.empty(n)
    kernels.scale_kernel[(triton_cdiv(n, 32),)](x, out, n, BLOCK=32, backend="numba")
    return x, out


def triton_cdiv(a: int, b: int) -> int:
    return (a + b - 1) // b


def _new_process(kernels) -> None:
    """What a new process starts with: no compiled specialisation, no imported generated module."""
    kernels.scale_kernel.clear_cache()
    kernels.unmasked_store.clear_cache()
    executable._modules.clear()


def _sidecars(cache: Path) -> list[Path]:
    return sorted(cache.rglob("warm/*.json"))


def _key(kernels, *args, eager_reads: bool = False, **kwargs) -> str:
    jf = kernels.scale_kernel
    return warm_index.warm_key(jf, specialize(jf, jf.bind(args, kwargs)), eager_reads)


# --------------------------------------------------------------------------- hits


def test_a_hit_skips_the_front_end_and_the_code_generator(fresh_cache, counted, tmp_path):
    kernels = _module(tmp_path)
    x, out = _launch(kernels)
    torch.testing.assert_close(out, x * 2.0, atol=0, rtol=0)
    assert counted == {"frontend": 1, "lower": 1}
    assert len(_sidecars(fresh_cache)) == 1

    _new_process(kernels)
    x, out = _launch(kernels, n=77)  # same specialisation (n is an i32 scalar either way)
    torch.testing.assert_close(out, x * 2.0, atol=0, rtol=0)
    assert counted == {"frontend": 1, "lower": 1}  # neither ran again

    ck = next(iter(kernels.scale_kernel.cache.values()))
    exe = ck.executable("numba")
    assert exe._fn is None and exe._lowered is None
    # the IR and the lowering are still there on demand, and lower to the very module that runs
    assert ck.ir.name == "scale_kernel" and counted["frontend"] == 2
    assert exe.lowered.digest == exe._digest and exe.module.__file__.endswith(exe._digest + ".py")
    assert [(p.name, p.kind) for p in ck.ir.params] == [(p.name, p.kind) for p in exe.params]


def test_a_fault_in_a_kernel_loaded_through_the_index_is_reported_in_full(fresh_cache, tmp_path):
    kernels = _module(tmp_path)
    out = torch.zeros(6)
    with pytest.raises(KernelRuntimeError, match="out-of-bounds store of argument 'out'") as cold:
        kernels.unmasked_store[(1,)](out[:4], BLOCK=8, backend="numba")
    _new_process(kernels)
    with pytest.raises(KernelRuntimeError, match="out-of-bounds store of argument 'out'") as warm:
        kernels.unmasked_store[(1,)](out[:4], BLOCK=8, backend="numba")
    assert str(warm.value) == str(cold.value)
    assert out[4:].tolist() == [0.0, 0.0]  # nothing written outside the tensor
    exe = next(iter(kernels.unmasked_store.cache.values())).executable("numba")
    assert exe._lowered is not None and exe.lowered.digest == exe._digest  # lowered for the fault report


def test_a_new_process_hits_and_two_concurrent_cold_processes_leave_a_valid_index(tmp_path):
    """Two processes compile the same kernels at once into one cold cache, then a third starts warm."""
    _module(tmp_path)  # writes warm_kernels.py
    script = tmp_path / "run.py"
    script.write_text(textwrap.dedent("""
        import sys
        import torch
        sys.path.insert(0, sys.argv[1])
        from torch_rbln.dsl import frontend
        import warm_kernels
        calls = []
        real = frontend.compile_kernel
        frontend.compile_kernel = lambda *a: calls.append(1) or real(*a)
        for n, dtype in ((100, torch.float32), (64, torch.float16)):
            x = torch.randn(n).to(dtype)
            out = torch.empty(n, dtype=dtype)
            warm_kernels.scale_kernel[((n + 31) // 32,)](x, out, n, BLOCK=32, backend="numba")
            assert torch.equal(out, (x.float() * 2.0).to(dtype)), dtype
        print("frontend", len(calls))
    """))
    env = dict(os.environ, TORCH_RBLN_CACHE_DIR=str(tmp_path / "shared"), TORCH_RBLN_LOG_LEVEL="ERROR")
    env.pop("TORCH_RBLN_DSL_BACKEND", None)
    command = [sys.executable, str(script), str(tmp_path)]
    first = [subprocess.Popen(command, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
             for _ in range(2)]
    for process in first:
        stdout, stderr = process.communicate(timeout=600)
        assert process.returncode == 0, stderr
        # each traced the kernels itself, or found the other's sidecars already (a hit) and loaded them
        assert stdout.strip() in ("frontend 0", "frontend 1", "frontend 2")
    assert len(_sidecars(tmp_path / "shared")) == 2
    third = subprocess.run(command, env=env, capture_output=True, text=True, timeout=600)
    assert third.returncode == 0, third.stderr
    assert "frontend 0" in third.stdout
    assert "warm index" not in third.stderr


def test_concurrent_writers_never_tear_a_sidecar(fresh_cache, tmp_path):
    """Two processes rewrite one sidecar as fast as they can while this one reads it: every read sees a
    whole, trusted entry (atomic rename), never a torn file."""
    root = str(fresh_cache / "kernels")
    text = "def k():\n    pass\n"
    import hashlib

    digest = hashlib.sha256(text.encode()).hexdigest()[:24]
    entry = warm_index.Entry("k", digest, (0,), (1,), False, False)
    Path(warm_index.module_path(root, entry)).parent.mkdir(parents=True, exist_ok=True)
    Path(warm_index.module_path(root, entry)).write_text(text)

    class Spec:
        params = (("x", "ptr", "fp32"), ("n", "scalar", "i32"))

    key = "f" * 64
    warm_index.write(root, key, entry)
    writer = textwrap.dedent(f"""
        from torch_rbln.dsl.backends.numba_backend import warm_index
        entry = warm_index.Entry("k", {digest!r}, (0,), (1,), False, False)
        for _ in range(300):
            warm_index.write({root!r}, {key!r}, entry)
    """)
    writers = [subprocess.Popen([sys.executable, "-c", writer]) for _ in range(2)]
    reads = 0
    while any(w.poll() is None for w in writers):
        assert warm_index.read(root, key, Spec) == entry
        reads += 1
    assert all(w.wait() == 0 for w in writers)
    assert warm_index.read(root, key, Spec) == entry and reads > 0
    assert not [p for p in Path(root, "warm").iterdir() if p.name.startswith(".tmp-")]


# --------------------------------------------------------------------------- damaged sidecars


def _corrupt(path: Path) -> None:
    path.write_bytes(b"\x80\x03garbage{")


def _truncate(path: Path) -> None:
    path.write_bytes(path.read_bytes()[: len(path.read_bytes()) // 2])


def _empty(path: Path) -> None:
    path.write_bytes(b"")


def _foreign(path: Path) -> None:
    record = json.loads(path.read_text())
    record["key"] = "0" * 64  # another specialisation's sidecar copied here
    path.write_text(json.dumps(record))


def _other_format(path: Path) -> None:
    record = json.loads(path.read_text())
    record["format"] = 99
    path.write_text(json.dumps(record))


def _wrong_params(path: Path) -> None:
    record = json.loads(path.read_text())
    record["ptr_params"] = [0]
    path.write_text(json.dumps(record))


def _stale_module(path: Path) -> None:
    record = json.loads(path.read_text())
    module = path.parent.parent / f"{record['name']}_{record['digest']}.py"
    module.write_text(module.read_text() + "\n# edited\n")


def _missing_module(path: Path) -> None:
    record = json.loads(path.read_text())
    (path.parent.parent / f"{record['name']}_{record['digest']}.py").unlink()


@pytest.mark.parametrize("damage, warns", [
    (_corrupt, "is corrupt"), (_truncate, "is corrupt"), (_empty, "is corrupt"), (_foreign, "foreign"),
    (_other_format, "of another format"), (_wrong_params, "foreign"), (_stale_module, "does not match"),
    (_missing_module, None),
])
def test_a_damaged_foreign_or_stale_sidecar_is_ignored_and_rebuilt(fresh_cache, counted, tmp_path, capfd,
                                                                   damage, warns):
    kernels = _module(tmp_path)
    _launch(kernels)
    (sidecar,) = _sidecars(fresh_cache)
    good = sidecar.read_text()
    damage(sidecar)
    capfd.readouterr()
    _new_process(kernels)
    x, out = _launch(kernels)
    torch.testing.assert_close(out, x * 2.0, atol=0, rtol=0)
    assert counted["frontend"] == 2  # the front end ran again
    err = capfd.readouterr().err
    if warns is None:
        assert "warm index" not in err
    else:
        assert "[TORCH-RBLN][WARNING]" in err and warns in err
    assert sidecar.read_text() == good  # rewritten
    _new_process(kernels)
    _launch(kernels)
    assert counted["frontend"] == 2  # and trusted again


def test_dumping_kernels_takes_the_front_end(fresh_cache, counted, tmp_path, monkeypatch):
    kernels = _module(tmp_path)
    _launch(kernels)
    monkeypatch.setenv("TORCH_RBLN_DUMP_KERNELS", str(tmp_path / "dump"))
    config.reset_for_tests()
    _new_process(kernels)
    _launch(kernels)
    assert counted["frontend"] == 2 and list((tmp_path / "dump").glob("*.ir"))


# --------------------------------------------------------------------------- the key


def test_every_specialisation_input_changes_the_key(tmp_path):
    kernels = _module(tmp_path)
    x32, x16, out = torch.empty(4), torch.empty(4, dtype=torch.float16), torch.empty(4)
    keys = [
        _key(kernels, x32, out, 4, BLOCK=32),
        _key(kernels, x32, out, 4, BLOCK=64),  # constexpr value
        _key(kernels, x16, out, 4, BLOCK=32),  # pointer dtype
        _key(kernels, x32, out, 2**40, BLOCK=32),  # scalar width (i64)
        _key(kernels, x32, out, 4.0, BLOCK=32),  # scalar type (fp32)
        _key(kernels, x32, out, 4, BLOCK=32, eager_reads=True),  # the alias-safe variant
        _key(kernels, None, out, 4, BLOCK=32),  # None for a pointer
    ]
    assert len(set(keys)) == len(keys)
    assert _key(kernels, x32, torch.empty(9), 7, BLOCK=32) == keys[0]  # sizes and values are not inputs


def test_every_kernel_input_changes_the_key(tmp_path):
    base = _key(_module(tmp_path, "k0"), torch.empty(4), torch.empty(4), 4, BLOCK=32)

    def key(name, **changes):
        return _key(_module(tmp_path, name, **changes), torch.empty(4), torch.empty(4), 4, BLOCK=32)

    assert key("k0") == base  # the same file again: the same key
    variants = {
        "source": key("k0", extra=" + 0.0"),
        "global": key("k0", scale=3.0),
        "helper": key("k0", helper_factor=2.0),  # a @jit function the kernel calls
        "line": key("k0", prefix="\n"),  # the generated module names the kernel's line
        "file": key("k1"),
    }
    assert len({base, *variants.values()}) == len(variants) + 1, variants


def test_a_global_reached_through_a_user_module_is_part_of_the_key(tmp_path):
    kernels = _module(tmp_path, extra=" * cfg.FACTOR", prefix="import types\ncfg = types.ModuleType('cfg')\n"
                      "cfg.FACTOR = 1.5\n")
    jf = kernels.scale_kernel
    arguments = jf.bind((torch.empty(4), torch.empty(4), 4), {"BLOCK": 32})
    before = warm_index.warm_key(jf, specialize(jf, arguments))
    kernels.cfg.FACTOR = 2.5
    jf._warm_token = None  # as a new process would compute it
    kernels.helper._warm_token = None
    assert warm_index.warm_key(jf, specialize(jf, arguments)) != before


def test_a_kernel_naming_a_value_without_a_stable_token_is_ineligible(fresh_cache, counted, tmp_path):
    """A plain Python function's body can change under the same name: such kernels always take the front
    end (and still run)."""
    kernels = _module(tmp_path, extra=" * FACTOR()", prefix="def FACTOR():\n    return 1.0\n\n")
    with pytest.raises(warm_index.Ineligible):
        _key(kernels, torch.empty(4), torch.empty(4), 4, BLOCK=32)
    with pytest.raises(warm_index.Ineligible):
        warm_index.value_token(object())


def test_value_tokens_tell_values_apart():
    import numpy as np
    import torch_rbln.dsl as tl

    values = [1, True, 1.0, "1", None, (1, 2), [1, 2], (1, (2,)), tl.float16, tl.float32, torch.float16,
              torch.bfloat16, np.int64(1), np.float32(1), tl.constexpr(3), 3.5]
    tokens = [warm_index.value_token(v) for v in values]
    assert len(set(tokens)) == len(tokens), tokens
    assert warm_index.value_token(tl.constexpr(1)) == warm_index.value_token(1)  # the front end unwraps it
    assert warm_index.value_token(tl.float16) == warm_index.value_token(tl.float16)


@pytest.mark.parametrize("package", ["numba", "llvmlite", "numpy", "jinja2", "python"])
def test_each_tool_version_changes_the_key(tmp_path, monkeypatch, package):
    kernels = _module(tmp_path)
    args = (torch.empty(4), torch.empty(4), 4)
    warm_index.toolchain_fingerprint.cache_clear()
    before = _key(kernels, *args, BLOCK=32)
    real = warm_index._versions

    def versions():
        return [(name, value + "-other" if name == package else value) for name, value in real()]

    monkeypatch.setattr(warm_index, "_versions", versions)
    warm_index.toolchain_fingerprint.cache_clear()
    try:
        assert _key(kernels, *args, BLOCK=32) != before
    finally:
        monkeypatch.undo()
        warm_index.toolchain_fingerprint.cache_clear()
    assert _key(kernels, *args, BLOCK=32) == before


@pytest.mark.parametrize("relative", ["frontend.py", "semantic.py", "backends/numba_backend/codegen.py",
                                      "backends/numba_backend/support.py",
                                      "backends/numba_backend/templates/kernel.py.j2"])
def test_an_edit_of_any_dsl_source_changes_the_fingerprint(tmp_path, relative):
    copy = tmp_path / "dsl"
    shutil.copytree(warm_index._DSL_ROOT, copy, ignore=shutil.ignore_patterns("__pycache__"))
    before = warm_index.source_fingerprint(copy)
    assert before == warm_index.source_fingerprint(warm_index._DSL_ROOT)
    with open(copy / relative, "a") as stream:
        stream.write("\n")
    assert warm_index.source_fingerprint(copy) != before


def test_decorators_and_the_signature_are_not_part_of_the_kernel_token(tmp_path):
    """The front end never evaluates a kernel's decorators (an @autotune's configs, prune functions) or
    its signature: a value without a token there leaves the kernel eligible."""
    path = tmp_path / "decorated.py"
    path.write_text(textwrap.dedent('''
        import torch_rbln.dsl as tl


        def tag(value):
            return lambda kernel: kernel


        def prune(configs):
            return configs


        @tag(prune)
        @tl.jit
        def decorated(out, BLOCK: tl.constexpr = 4):
            tl.store(out + tl.arange(0, BLOCK), 1.0)
    '''))
    spec = importlib.util.spec_from_file_location("decorated", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    assert len(warm_index.kernel_token(module.decorated)) == 64

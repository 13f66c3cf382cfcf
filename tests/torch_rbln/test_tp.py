"""torch_rbln.tp: tensor-parallel sizes and the tp failover."""

from __future__ import annotations

import pytest
from envutil import isolate, run_python

from torch_rbln import config, tp


@pytest.fixture
def env(monkeypatch):
    isolate(monkeypatch)

    def set_(**variables: str) -> None:
        isolate(monkeypatch, **variables)

    yield set_
    isolate(monkeypatch)


class Model:
    """A stand-in for compile+run: fails for tp > max_tp."""

    def __init__(self, max_tp: int = 1, error: type[BaseException] = RuntimeError) -> None:
        self.max_tp = max_tp
        self.error = error
        self.calls: list[int] = []

    def __call__(self, n: int) -> str:
        self.calls.append(n)
        if n > self.max_tp:
            raise self.error(f"tp={n} not supported")
        return f"ran with tp={n}"


def test_tp_size_defaults_to_one(env):
    env(TORCH_RBLN_SIM_NPUS="8", RBLN_NPUS_PER_DEVICE="4")
    assert tp.tp_size_for(0) == 1
    assert tp.tp_size_for(1) == 1


@pytest.mark.parametrize("value", ["ON", "on", "1", "true", "yes"])
def test_use_device_tp_follows_group_size(env, value):
    env(TORCH_RBLN_SIM_NPUS="6", RBLN_DEVICE_MAP="[0,1],[2,3,4,5]", TORCH_RBLN_USE_DEVICE_TP=value)
    assert tp.tp_size_for(0) == 2
    assert tp.tp_size_for(1) == 4


@pytest.mark.parametrize("value", ["OFF", "0", "false", "no", ""])
def test_use_device_tp_off(env, value):
    env(TORCH_RBLN_SIM_NPUS="4", RBLN_NPUS_PER_DEVICE="4", TORCH_RBLN_USE_DEVICE_TP=value)
    assert tp.tp_size_for(0) == 1


def test_use_device_tp_one_to_one(env):
    env(TORCH_RBLN_USE_DEVICE_TP="ON")
    assert tp.tp_size_for(3) == 1


def test_use_device_tp_invalid(env):
    env(TORCH_RBLN_USE_DEVICE_TP="always")
    with pytest.raises(config.ConfigError, match="Invalid TORCH_RBLN_USE_DEVICE_TP 'always'"):
        tp.tp_size_for(0)


def test_tp_size_checks_device_index(env):
    env(TORCH_RBLN_SIM_NPUS="4", RBLN_NPUS_PER_DEVICE="2")
    with pytest.raises(RuntimeError, match=r"Logical device rbln:2 is not assigned"):
        tp.tp_size_for(2)


def test_root_npu_and_group_size(env):
    env(TORCH_RBLN_SIM_NPUS="8", RBLN_DEVICE_MAP="[5,4],[0,1,2,3]")
    assert tp.root_npu(0) == 5 and tp.group_size(0) == 2
    assert tp.root_npu(1) == 0 and tp.group_size(1) == 4
    with pytest.raises(RuntimeError, match="rbln:2 is not assigned"):
        tp.root_npu(2)


def test_compile_tp_size(env):
    env(TORCH_RBLN_SIM_NPUS="8", RBLN_NPUS_PER_DEVICE="4")
    assert tp.compile_tp_size(1) == (4, False)  # defaults to the group size, even without USE_DEVICE_TP
    assert tp.compile_tp_size(1, 2) == (2, True)  # an explicit option wins
    assert tp.compile_tp_size(0, 1) == (1, True)
    for bad in (0, -1, 1.5, True, "2"):
        with pytest.raises(ValueError, match="tensor_parallel_size must be a positive integer"):
            tp.compile_tp_size(0, bad)


# ---------------------------------------------------------------- failover


def failover_env(env, **extra: str) -> None:
    env(TORCH_RBLN_SIM_NPUS="8", RBLN_DEVICE_MAP="[0,1,2,3],[6,7,4,5]", **extra)


@pytest.mark.parametrize("value", ["ON", "on", "1", "True", "YES"])
def test_failover_retries_with_tp1_and_warns(env, capsys, value):
    failover_env(env, TORCH_RBLN_USE_TP_FAILOVER=value)
    model = Model()
    assert tp.run_with_tp_failover("llama", model, device_index=1, tp=4) == "ran with tp=1"
    assert model.calls == [4, 1]
    assert capsys.readouterr().err == (
        "[TORCH-RBLN][WARNING] Model 'llama' unsupported with tp=4. "
        "Retrying with tp=1 on root device (NPU 6).\n"
    )


def test_failover_off_by_default_propagates(env, capsys):
    failover_env(env)
    model = Model()
    with pytest.raises(RuntimeError, match="tp=4 not supported"):
        tp.run_with_tp_failover("m", model, device_index=0, tp=4)
    assert model.calls == [4]
    assert "Retrying" not in capsys.readouterr().err


@pytest.mark.parametrize("value", ["OFF", "0", "false", "no"])
def test_failover_explicitly_off(env, value):
    failover_env(env, TORCH_RBLN_USE_TP_FAILOVER=value)
    with pytest.raises(RuntimeError):
        tp.run_with_tp_failover("m", Model(), device_index=0, tp=4)


def test_failover_not_for_explicit_tp(env, capsys):
    failover_env(env, TORCH_RBLN_USE_TP_FAILOVER="ON")
    model = Model()
    with pytest.raises(RuntimeError):
        tp.run_with_tp_failover("m", model, device_index=0, tp=4, explicit=True)
    assert model.calls == [4]
    assert "Retrying" not in capsys.readouterr().err


def test_failover_not_for_tp1(env):
    failover_env(env, TORCH_RBLN_USE_TP_FAILOVER="ON")
    model = Model(max_tp=0)
    with pytest.raises(RuntimeError):
        tp.run_with_tp_failover("m", model, device_index=0, tp=1)
    assert model.calls == [1]


@pytest.mark.parametrize("error", [ValueError, TypeError, KeyboardInterrupt])
def test_failover_only_for_runtime_errors(env, error):
    failover_env(env, TORCH_RBLN_USE_TP_FAILOVER="ON")
    model = Model(error=error)
    with pytest.raises(error):
        tp.run_with_tp_failover("m", model, device_index=0, tp=4)
    assert model.calls == [4]


def test_failover_covers_runtime_error_subclasses(env):
    failover_env(env, TORCH_RBLN_USE_TP_FAILOVER="ON")
    model = Model(error=NotImplementedError)
    assert tp.run_with_tp_failover("m", model, device_index=0, tp=2) == "ran with tp=1"


def test_failover_second_failure_propagates(env, capsys):
    failover_env(env, TORCH_RBLN_USE_TP_FAILOVER="ON")
    model = Model(max_tp=0)
    with pytest.raises(RuntimeError, match="tp=1 not supported"):
        tp.run_with_tp_failover("m", model, device_index=0, tp=4)
    assert model.calls == [4, 1]
    assert "Retrying with tp=1 on root device (NPU 0)." in capsys.readouterr().err


def test_success_needs_no_failover(env, capsys):
    failover_env(env, TORCH_RBLN_USE_TP_FAILOVER="ON")
    model = Model(max_tp=4)
    assert tp.run_with_tp_failover("m", model, device_index=0, tp=4) == "ran with tp=4"
    assert model.calls == [4]
    assert capsys.readouterr().err == ""


def test_failover_invalid_variable(env):
    failover_env(env, TORCH_RBLN_USE_TP_FAILOVER="sure")
    with pytest.raises(config.ConfigError, match="Invalid TORCH_RBLN_USE_TP_FAILOVER 'sure'"):
        tp.run_with_tp_failover("m", Model(), device_index=0, tp=4)


def test_failover_end_to_end_subprocess():
    code = (
        "from torch_rbln import tp\n"
        "def run(n):\n"
        "    if n > 1:\n"
        "        raise RuntimeError('no tp')\n"
        "    return n\n"
        "print(tp.run_with_tp_failover('bert', run, device_index=0, tp=tp.compile_tp_size(0)[0]))\n"
    )
    r = run_python(code, RBLN_NPUS_PER_DEVICE="4", TORCH_RBLN_USE_TP_FAILOVER="ON")
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == "1"
    assert r.stderr == (
        "[TORCH-RBLN][WARNING] Model 'bert' unsupported with tp=4. "
        "Retrying with tp=1 on root device (NPU 0).\n"
    )

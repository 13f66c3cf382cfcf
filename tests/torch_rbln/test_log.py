"""torch_rbln.log: the torch_rbln logger, levels, release/debug modes and the debug log file."""

from __future__ import annotations

import inspect
import logging
import re
import threading

import pytest
from envutil import isolate, run_python

from torch_rbln import config, log


@pytest.fixture
def env(monkeypatch, tmp_path):
    """Clean environment, cwd in a temporary folder, logging unconfigured before and after."""
    monkeypatch.chdir(tmp_path)
    isolate(monkeypatch)

    def set_(**variables: str) -> None:
        isolate(monkeypatch, **variables)

    yield set_
    log.reset_for_tests()


def emit_all(logger: logging.Logger) -> None:
    logger.debug("d-msg")
    logger.info("i-msg")
    logger.warning("w-msg")
    logger.error("e-msg")


def shown(err: str) -> list[str]:
    return re.findall(r"\[TORCH-RBLN\]\[(\w+)\] (\w)-msg", err)


def test_logger_names_and_propagation(env):
    logger = log.get_logger()
    assert logger.name == "torch_rbln"
    assert logger.propagate is False
    assert log.get_logger("fallback").name == "torch_rbln.fallback"
    assert log.get_logger("fallback").parent is logger
    assert log.is_configured()


def test_format_on_stderr(env, capsys):
    log.get_logger().warning("hello %s", "world")
    log.get_logger("part").error("boom")
    captured = capsys.readouterr()
    assert captured.err == "[TORCH-RBLN][WARNING] hello world\n[TORCH-RBLN][ERROR] boom\n"
    assert captured.out == ""


def test_handler_follows_current_stderr_with_capfd(env, capfd):
    log.get_logger().warning("via fd")
    assert "[TORCH-RBLN][WARNING] via fd\n" in capfd.readouterr().err


def test_not_propagated_to_root_logger(env, capsys):
    records: list[logging.LogRecord] = []

    class Collect(logging.Handler):
        def emit(self, record):
            records.append(record)

    root_handler = Collect()
    logging.getLogger().addHandler(root_handler)
    try:
        log.get_logger("x").error("private")
    finally:
        logging.getLogger().removeHandler(root_handler)
    assert records == []
    assert "private" in capsys.readouterr().err


def test_default_level_is_warning(env, capsys):
    emit_all(log.get_logger("t"))
    assert shown(capsys.readouterr().err) == [("WARNING", "w"), ("ERROR", "e")]


@pytest.mark.parametrize(
    ("level", "expected"),
    [
        ("INFO", ["i", "w", "e"]),
        ("info", ["i", "w", "e"]),
        ("Warning", ["w", "e"]),
        ("ERROR", ["e"]),
        ("error", ["e"]),
        ("DEBUG", ["i", "w", "e"]),  # release mode: DEBUG acts as INFO
        ("debug", ["i", "w", "e"]),
    ],
)
def test_levels_in_release_mode(env, capsys, level, expected):
    env(TORCH_RBLN_LOG_LEVEL=level)
    emit_all(log.get_logger("t"))
    assert [m for _, m in shown(capsys.readouterr().err)] == expected


def test_release_mode_lowest_effective_level_is_info(env):
    env(TORCH_RBLN_LOG_LEVEL="DEBUG", RBLN_BUILD_TYPE="Release")
    assert log.get_logger().getEffectiveLevel() == logging.INFO
    assert not log.get_logger("x").isEnabledFor(logging.DEBUG)


@pytest.mark.parametrize("build_type", ["Debug", "debug", "DEBUG"])
def test_debug_mode_enables_debug(env, capsys, tmp_path, build_type):
    env(TORCH_RBLN_LOG_LEVEL="DEBUG", RBLN_BUILD_TYPE=build_type, TORCH_RBLN_LOG_PATH=str(tmp_path / "d.log"))
    emit_all(log.get_logger("t"))
    assert [m for _, m in shown(capsys.readouterr().err)] == ["d", "i", "w", "e"]


def test_debug_mode_writes_log_file_with_location_and_thread(env, tmp_path, capsys):
    path = tmp_path / "sub.log"
    env(RBLN_BUILD_TYPE="Debug", TORCH_RBLN_LOG_LEVEL="INFO", TORCH_RBLN_LOG_PATH=str(path))
    logger = log.get_logger("t")
    line = inspect.currentframe().f_lineno + 1
    logger.info("file-record")
    worker_ident = []

    def worker():
        worker_ident.append(threading.get_ident())
        logger.warning("from-thread")

    t = threading.Thread(target=worker)
    t.start()
    t.join()
    logger.debug("hidden-debug")  # below INFO: neither on stderr nor in the file
    log.reset_for_tests()  # closes the file
    text = path.read_text()
    lines = text.splitlines()
    assert len(lines) == 2, text
    first, second = lines
    assert re.match(r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3} ", first)
    assert f"[TORCH-RBLN][INFO] [test_log.py:{line}] [thread {threading.get_ident()}] file-record" in first
    assert f"[thread {worker_ident[0]}] from-thread" in second
    assert "[TORCH-RBLN][WARNING]" in second
    err = capsys.readouterr().err
    assert "[TORCH-RBLN][INFO] file-record\n" in err  # stderr keeps the short format
    assert "hidden-debug" not in err


def test_debug_mode_default_log_path_is_cwd(env, tmp_path):
    env(RBLN_BUILD_TYPE="Debug")
    log.get_logger()
    assert (tmp_path / "torch_rbln.log").exists()  # always created in debug mode
    log.get_logger().error("to-default-file")
    log.reset_for_tests()
    assert "to-default-file" in (tmp_path / "torch_rbln.log").read_text()


def test_debug_mode_creates_missing_folder(env, tmp_path):
    path = tmp_path / "logs" / "deep" / "x.log"
    env(RBLN_BUILD_TYPE="Debug", TORCH_RBLN_LOG_PATH=str(path))
    log.get_logger().warning("in-folder")
    log.reset_for_tests()
    assert "in-folder" in path.read_text()


def test_debug_mode_appends(env, tmp_path):
    path = tmp_path / "a.log"
    path.write_text("earlier\n")
    env(RBLN_BUILD_TYPE="Debug", TORCH_RBLN_LOG_PATH=str(path))
    log.get_logger().warning("later")
    log.reset_for_tests()
    text = path.read_text()
    assert text.startswith("earlier\n") and "later" in text


def test_release_mode_writes_no_file(env, tmp_path, capsys):
    env(TORCH_RBLN_LOG_LEVEL="INFO", TORCH_RBLN_LOG_PATH=str(tmp_path / "r.log"))
    log.get_logger().error("x")
    log.reset_for_tests()
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("value", ["x", "verbose", "TRACE", "CRITICAL"])
def test_invalid_level_is_an_error(env, value):
    env(TORCH_RBLN_LOG_LEVEL=value)
    for _ in range(2):  # stays unconfigured, raises again
        with pytest.raises(config.ConfigError) as e:
            log.get_logger()
        assert str(e.value) == (
            f"Invalid TORCH_RBLN_LOG_LEVEL '{value}', expected one of: DEBUG, INFO, WARNING, ERROR"
        )
        assert not log.is_configured()


def test_invalid_build_type_is_an_error(env):
    env(RBLN_BUILD_TYPE="Profile")
    expected = "Invalid RBLN_BUILD_TYPE 'Profile', expected one of: Release, Debug"
    with pytest.raises(config.ConfigError, match=expected):
        log.get_logger()


def test_configuration_is_idempotent_and_lazy(env, monkeypatch, capsys):
    assert not log.is_configured()
    # pytest (>= 9.2) attaches its own capture handlers to non-propagating loggers such as ours: only
    # the handlers configuration adds are torch_rbln's
    runner_handlers = list(logging.getLogger(log.LOGGER_NAME).handlers)
    logger = log.get_logger()
    handlers = list(logger.handlers)
    assert len(handlers) == len(runner_handlers) + 1
    monkeypatch.setenv("TORCH_RBLN_LOG_LEVEL", "ERROR")  # ignored once configured
    for part in (None, "a", "b"):
        log.get_logger(part)
    assert logger.handlers == handlers
    logger.warning("still-warning")
    assert "still-warning" in capsys.readouterr().err
    log.reset_for_tests()
    assert logger.handlers == runner_handlers and not log.is_configured()
    log.get_logger().warning("now-hidden")
    assert "now-hidden" not in capsys.readouterr().err


def test_log_fallback(env, capsys):
    env(TORCH_RBLN_LOG_LEVEL="INFO")
    log.log_fallback("aten::cos", "no rbln kernel")
    log.log_fallback("aten::add.Tensor", "dtype float64")
    log.log_fallback("aten::max", "nan_inf")
    later = "; later calls for this reason are counted, not logged (torch_rbln.registry.fallback_report())"
    assert capsys.readouterr().err == (
        f"[TORCH-RBLN][INFO] `aten::cos` op ran on CPU instead of RBLN (no rbln kernel){later}\n"
        f"[TORCH-RBLN][INFO] `aten::add.Tensor` op ran on CPU instead of RBLN (dtype float64){later}\n"
        f"[TORCH-RBLN][INFO] `aten::max` op ran on CPU instead of RBLN (nan_inf){later}\n"
    )


def test_fallbacks_are_logged_once_per_op_and_reason_and_all_counted(env, capsys):
    from torch_rbln import fallback

    env(TORCH_RBLN_LOG_LEVEL="INFO")
    log.get_logger()  # configured from the environment, as the first fallback of a program does
    fallback.reset_fallback_counts()
    for _ in range(50):
        fallback.record("aten::cos")
        fallback.record("aten::add.Tensor", "dtype float64")
    fallback.record("aten::add.Tensor", "nan_inf")
    lines = capsys.readouterr().err.splitlines()
    assert len(lines) == 3
    assert "`aten::cos` op ran on CPU instead of RBLN (no rbln kernel)" in lines[0]
    assert fallback.fallback_counts() == {"aten::cos": 50, "aten::add.Tensor": 51}
    assert fallback.fallback_reasons()["aten::add.Tensor"] == {"dtype float64": 50, "nan_inf": 1}
    fallback.reset_fallback_counts()  # a reset starts the log over too
    fallback.record("aten::cos")
    assert "aten::cos" in capsys.readouterr().err
    fallback.reset_fallback_counts()


def test_a_level_the_program_set_wins_over_the_environment(env, capsys):
    import logging

    env(TORCH_RBLN_LOG_LEVEL="ERROR")
    logging.getLogger(log.LOGGER_NAME).setLevel(logging.INFO)
    log.get_logger("x").info("program-chose-info")
    assert "program-chose-info" in capsys.readouterr().err


def test_debug_log_names_the_code_that_fell_back(env, tmp_path):
    from torch_rbln import fallback

    path = tmp_path / "debug.log"
    env(TORCH_RBLN_LOG_LEVEL="INFO", RBLN_BUILD_TYPE="Debug", TORCH_RBLN_LOG_PATH=str(path))
    log.get_logger()
    fallback.reset_fallback_counts()

    def caller_of_record():
        fallback.record("aten::sinh", "test reason")

    caller_of_record()
    log.reset_for_tests()  # closes the file
    text = path.read_text()
    assert "[test_log.py:" in text and "[log.py:" not in text and "[fallback.py:" not in text
    fallback.reset_fallback_counts()


def test_log_fallback_hidden_at_default_level(env, capsys):
    log.log_fallback("aten::cos")
    assert capsys.readouterr().err == ""


SCRIPT = """\
import threading
from torch_rbln import log
logger = log.get_logger("e2e")
logger.debug("dbg-line")
print(threading.get_ident())
"""


def test_subprocess_debug_mode_log_file(tmp_path):
    script = tmp_path / "script.py"
    script.write_text(SCRIPT)
    r = run_python(
        f"exec(compile(open({str(script)!r}).read(), {str(script)!r}, 'exec'))",
        cwd=str(tmp_path),
        RBLN_BUILD_TYPE="Debug",
        TORCH_RBLN_LOG_LEVEL="debug",
    )
    assert r.returncode == 0, r.stderr
    assert r.stderr == "[TORCH-RBLN][DEBUG] dbg-line\n"
    text = (tmp_path / "torch_rbln.log").read_text()
    assert f"[TORCH-RBLN][DEBUG] [script.py:4] [thread {r.stdout.strip()}] dbg-line" in text


def test_subprocess_release_mode_no_log_file(tmp_path):
    code = "from torch_rbln import log; log.get_logger().info('rel'); log.get_logger().debug('no')"
    r = run_python(code, cwd=str(tmp_path), TORCH_RBLN_LOG_LEVEL="DEBUG", TORCH_RBLN_LOG_PATH="x.log")
    assert r.returncode == 0, r.stderr
    assert r.stderr == "[TORCH-RBLN][INFO] rel\n"
    assert list(tmp_path.iterdir()) == []


def test_subprocess_invalid_level():
    r = run_python("from torch_rbln import log; log.get_logger()", TORCH_RBLN_LOG_LEVEL="x")
    assert r.returncode != 0
    assert "Invalid TORCH_RBLN_LOG_LEVEL 'x', expected one of: DEBUG, INFO, WARNING, ERROR" in r.stderr


"""tests/compile_log_report.py: the compile log's summary counts a specialisation compiled twice (two
workers, or a cache miss) and each worker's busy time."""

from __future__ import annotations

import json

from .compile_log_report import _rows, report


def _row(test: str, worker: str, start: float, end: float, kernels: list) -> dict:
    return {"test": test, "worker": worker, "start": start, "end": end, "compiles": len(kernels),
            "seconds": sum(k[2] for k in kernels), "kernels": kernels}


def test_duplicates_workers_files_and_kernels_are_counted(tmp_path):
    rows = [_row("tests/a.py::one", "gw0", 100.0, 103.0, [["k", "k_1(BLOCK=8)", 2.5]]),
            _row("tests/b.py::two", "gw1", 100.0, 104.0, [["k", "k_1(BLOCK=8)", 3.0], ["j", "j_2()", 1.0]]),
            _row("tests/b.py::three", "gw1", 104.0, 110.0, [])]
    path = tmp_path / "log.jsonl"
    path.write_text("".join(json.dumps(row) + "\n" for row in rows))
    lines = report(_rows(str(path)))
    assert lines[0] == ("3 tests, 3 compiles, 6 s compiling, 10 s from the first test's start to the "
                        "last's end")
    assert lines[1] == "2 specialisations; 1 compiled more than once (1 extra compiles, 3 s)"
    assert lines[2] == "  k_1(BLOCK=8)"
    assert lines[3].split() == ["2.5", "s", "tests/a.py::one"]
    assert lines[6].split() == ["gw0", "1", "3", "2", "3"]
    assert lines[7].split() == ["gw1", "2", "10", "4", "10"]
    assert any(line.split() == ["2", "4", "10", "2", "tests/b.py"] for line in lines)
    assert any(line.split() == ["2", "6", "k"] for line in lines)
    assert report([]) == ["no tests logged"]

"""Summarise a test run's compile log (`RBLN_TEST_COMPILE_LOG=FILE python -m pytest ...`, see
tests/conftest.py): where a cold suite's numba time goes, by test file and by kernel; the
specialisations compiled more than once; and each xdist worker's busy time and last test, so an idle
tail shows. Usage: python tests/compile_log_report.py FILE [--top N]"""

from __future__ import annotations

import argparse
import collections
import json


def _rows(path: str) -> list[dict]:
    with open(path) as stream:
        return [json.loads(line) for line in stream if line.strip()]


def report(rows: list[dict], top: int = 25) -> list[str]:
    """The summary's lines (a list, so a test can read them)."""
    if not rows:
        return ["no tests logged"]
    start = min(row["start"] for row in rows)
    lines = [f"{len(rows)} tests, {sum(r['compiles'] for r in rows)} compiles, "
             f"{sum(r['seconds'] for r in rows):.0f} s compiling, "
             f"{max(r['end'] for r in rows) - start:.0f} s from the first test's start to the last's end"]
    by_key: dict[str, list[tuple[str, float]]] = collections.defaultdict(list)
    by_kernel: dict[str, list[float]] = collections.defaultdict(list)
    for row in rows:
        for name, key, seconds in row.get("kernels", []):
            by_key[key].append((row["test"], seconds))
            by_kernel[name].append(seconds)
    again = {key: runs for key, runs in by_key.items() if len(runs) > 1}
    lines.append(f"{len(by_key)} specialisations; {len(again)} compiled more than once "
                 f"({sum(len(runs) - 1 for runs in again.values())} extra compiles, "
                 f"{sum(s for runs in again.values() for _, s in runs[1:]):.0f} s)")
    for key, runs in sorted(again.items(), key=lambda item: -sum(s for _, s in item[1]))[:top]:
        lines.append(f"  {key[:150]}")
        lines.extend(f"      {seconds:6.1f} s  {test}" for test, seconds in runs)
    lines.append("worker   tests   busy s  compile s  last end s")
    for worker in sorted({row["worker"] for row in rows}):
        mine = [row for row in rows if row["worker"] == worker]
        lines.append(f"{worker:8s} {len(mine):5d} {sum(r['end'] - r['start'] for r in mine):8.0f} "
                     f"{sum(r['seconds'] for r in mine):10.0f} {max(r['end'] for r in mine) - start:11.0f}")
    files: dict[str, list[float]] = collections.defaultdict(lambda: [0, 0.0, 0.0, 0])
    for row in rows:
        entry = files[row["test"].split("::")[0]]
        entry[0] += row["compiles"]
        entry[1] += row["seconds"]
        entry[2] += row["end"] - row["start"]
        entry[3] += 1
    lines.append("compiles  compile s  test s  tests  file")
    for name, (count, seconds, wall, tests) in sorted(files.items(), key=lambda item: -item[1][2])[:top]:
        lines.append(f"{count:8d} {seconds:10.0f} {wall:7.0f} {tests:6d}  {name}")
    lines.append("compiles  compile s  kernel")
    for name, times in sorted(by_kernel.items(), key=lambda item: -sum(item[1]))[:top]:
        lines.append(f"{len(times):8d} {sum(times):10.0f}  {name}")
    return lines


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("log")
    parser.add_argument("--top", type=int, default=25)
    arguments = parser.parse_args()
    print("\n".join(report(_rows(arguments.log), arguments.top)))


if __name__ == "__main__":
    main()

"""SPEC-device.md through the real device, each case in a fresh process with only its variables."""

from __future__ import annotations

import re

import pytest
from envutil import run_python


def _run(code: str, **variables: str):
    return run_python("import torch, torch_rbln\n" + code, bare=False, **variables)


def test_invalid_mapping_does_not_break_import_torch_only_first_device_use() -> None:
    result = run_python(
        "import torch\nprint('imported', torch.rbln.is_initialized())\n"
        "try:\n    torch.ones(1, device='rbln:0')\nexcept RuntimeError as e:\n    print('error', e)\n",
        bare=False, RBLN_NPUS_PER_DEVICE="3", TORCH_DEVICE_BACKEND_AUTOLOAD="1",
    )
    assert result.returncode == 0, result.stderr
    assert "imported False" in result.stdout
    assert ("error RBLN_NPUS_PER_DEVICE must be one of the valid sizes: 1, 2, 4, 8, 16, 32. "
            "Got 3 which is invalid.") in result.stdout


def test_grouping_sets_device_count_and_rejects_unassigned_devices() -> None:
    result = _run(
        "print(torch.rbln.device_count(), torch.rbln.physical_device_count())\n"
        "x = torch.ones(2, device='rbln:1'); print(x.device)\n"
        "for make in (lambda: torch.ones(1, device='rbln:5'), lambda: torch.ones(1).to('rbln:5'),\n"
        "             lambda: torch.rbln.set_device(5), lambda: torch.rbln.memory_allocated(5)):\n"
        "    try:\n        make()\n    except RuntimeError as e:\n        print('error', e)\n",
        TORCH_RBLN_SIM_NPUS="4", RBLN_NPUS_PER_DEVICE="2",
    )
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    assert lines[0] == "2 4" and lines[1] == "rbln:1"
    expected = ("error Logical device rbln:5 is not assigned (this process has 2 logical device(s)). "
                "Env RBLN_DEVICE_MAP=-, RBLN_NPUS_PER_DEVICE=2.")
    assert lines[2:] == [expected] * 4


def test_unused_npus_warn_at_first_device_use() -> None:
    result = _run("torch.ones(1, device='rbln:0')\nprint(torch.rbln.topology().unused)\n",
                  TORCH_RBLN_SIM_NPUS="6", RBLN_NPUS_PER_DEVICE="4")
    assert result.returncode == 0, result.stderr
    assert "(4, 5)" in result.stdout
    assert "[TORCH-RBLN][WARNING]" in result.stderr and "4, 5" in result.stderr


def test_device_map_groups_and_summary_table() -> None:
    result = _run("torch.ones(1, device='rbln:1')\ntorch.rbln.device_summary()\n",
                  TORCH_RBLN_SIM_NPUS="6", RBLN_DEVICE_MAP="[0,1],[2,3,4,5]")
    assert result.returncode == 0, result.stderr
    assert result.stdout.splitlines() == [
        "[RBLN] Device Topology Initialized:",
        "+----------------+------------------+---------------------+",
        "| Logical Device | Physical NPU IDs | Status              |",
        "+----------------+------------------+---------------------+",
        "| rbln:0         | [ 0, 1 ]         | Active (Aggregated) |",
        "| rbln:1         | [ 2, 3, 4, 5 ]   | Active (Aggregated) |",
        "+----------------+------------------+---------------------+",
    ]


def test_rbln_devices_renumbers_visible_npus() -> None:
    result = _run("print(torch.rbln.physical_device_count(), torch.rbln.device_count())\n",
                  RBLN_DEVICES="2,3")
    assert result.returncode == 0, result.stderr
    assert result.stdout.split() == ["2", "2"]


@pytest.mark.parametrize(
    ("variables", "fragment"),
    [
        ({"TORCH_RBLN_LOG_LEVEL": "loud"}, "Invalid TORCH_RBLN_LOG_LEVEL 'loud', expected one of"),
        ({"TORCH_RBLN_SIM_MEMORY_GB": "-1"}, "TORCH_RBLN_SIM_MEMORY_GB"),
        ({"TORCH_RBLN_SIM_NPUS": "zero"}, "TORCH_RBLN_SIM_NPUS"),
        ({"RBLN_DEVICES": "0,9"}, "RBLN_DEVICES"),
    ],
)
def test_invalid_values_fail_at_first_device_use_with_the_variable_named(
    variables: dict[str, str], fragment: str
) -> None:
    result = _run("torch.ones(1, device='rbln:0')\n", **variables)
    assert result.returncode != 0
    assert fragment in result.stderr


def test_memory_of_grouped_device_and_oom() -> None:
    result = _run(
        "print(torch.rbln.mem_get_info(0)[1])\n"
        "try:\n    torch.empty(3 << 30, dtype=torch.uint8, device='rbln:0')\n"
        "except torch.OutOfMemoryError as e:\n    print('oom', e)\n",
        TORCH_RBLN_SIM_NPUS="2", RBLN_NPUS_PER_DEVICE="2", TORCH_RBLN_SIM_MEMORY_GB="1",
    )
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    assert lines[0] == str(2 << 30)
    assert lines[1].startswith("oom RBLN out of memory on rbln:0: tried to allocate 3.00 GiB")


def test_diagnose_passes_and_fails_with_exit_status() -> None:
    ok = run_python("import runpy, sys\nsys.argv=['diagnose']\nrunpy.run_module('torch_rbln.diagnose', "
                    "run_name='__main__')\n", bare=False)
    assert ok.returncode == 0, ok.stdout + ok.stderr
    assert ok.stdout.rstrip().endswith("PASS")
    for text in ("torch ", "numba", "DSL backend", "TORCH_RBLN_SIM_NPUS", " default ", "autotune db",
                 "Device Topology Initialized", "ok    rbln:7"):
        assert text in ok.stdout
    bad = run_python("import runpy, sys\nsys.argv=['diagnose']\nrunpy.run_module('torch_rbln.diagnose', "
                     "run_name='__main__')\n", bare=False, RBLN_NPUS_PER_DEVICE="3")
    assert bad.returncode == 1
    assert "RBLN_NPUS_PER_DEVICE must be one of the valid sizes" in bad.stdout
    assert bad.stdout.rstrip().endswith("FAIL")
    assert re.search(r"^RBLN_NPUS_PER_DEVICE\s+3\s+env\s", bad.stdout, re.MULTILINE)


def test_import_stays_light() -> None:
    result = run_python(
        "import sys, torch, torch_rbln\n"
        "torch.ones(2, device='rbln:0').cosh()\n"
        "heavy = ('numba', 'jinja2', 'sqlite_utils', 'torch._dynamo')\n"
        "print(sorted(m for m in heavy if m in sys.modules))\n",
        bare=False,
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "[]"

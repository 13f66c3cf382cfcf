"""The README's torchrun example runs as written: the `py` block of "## Distributed", launched by the
command in the `bash` block after it (torchrun is `python -m torch.distributed.run`)."""

from __future__ import annotations

import os
import pathlib
import re
import shlex
import subprocess
import sys

import pytest

README = pathlib.Path(__file__).resolve().parents[3] / "README.md"


def _example() -> tuple[str, list[str]]:
    section = README.read_text().split("## Distributed\n", 1)[1].split("\n## ", 1)[0]
    script = re.search(r"^```py\n(.*?)^```", section, flags=re.S | re.M).group(1)
    command = re.search(r"^```bash\n(.*?)^```", section, flags=re.S | re.M).group(1).strip()
    return script, shlex.split(command)


@pytest.mark.slow
def test_readme_torchrun_example(tmp_path):
    script, command = _example()
    assert command[0] == "torchrun"
    name = next(word for word in command if word.endswith(".py"))
    (tmp_path / name).write_text(script)
    env = {k: v for k, v in os.environ.items() if not k.startswith("RBLN_")}
    result = subprocess.run([sys.executable, "-m", "torch.distributed.run", *command[1:]], cwd=tmp_path,
                            env=env, capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, result.stderr[-3000:]
    assert re.search(r"^2 ranks on rbln, mean loss \d+\.\d{4}$", result.stdout, flags=re.M), result.stdout

"""Every Python code block of the README runs as written, each in a fresh interpreter."""

from __future__ import annotations

import os
import pathlib
import re
import subprocess
import sys

import pytest

README = pathlib.Path(__file__).resolve().parents[1] / "README.md"
BLOCKS = re.findall(r"^```python\n(.*?)^```", README.read_text(), flags=re.S | re.M)


def test_the_readme_has_code_blocks():
    assert len(BLOCKS) >= 5


@pytest.mark.parametrize("index", range(len(BLOCKS)), ids=lambda i: f"block{i + 1}")
def test_readme_block_runs(index, tmp_path):
    script = tmp_path / f"readme_block_{index + 1}.py"  # kernels need a file (inspect reads their source)
    script.write_text(BLOCKS[index])
    env = {k: v for k, v in os.environ.items() if not k.startswith("RBLN_")}
    env["TORCH_RBLN_AUTOTUNE_DB"] = str(tmp_path / "autotune.db")
    result = subprocess.run([sys.executable, str(script)], cwd=tmp_path, env=env, capture_output=True,
                            text=True, timeout=600)
    message = f"README block {index + 1} failed:\n{BLOCKS[index]}\n{result.stderr[-3000:]}"
    assert result.returncode == 0, message

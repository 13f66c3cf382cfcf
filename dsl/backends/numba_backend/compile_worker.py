"""`python -m torch_rbln.dsl.backends.numba_backend.compile_worker`: a compile process (see background.py).

Reads requests `(path, module name, function name, argument values)` from stdin, compiles that kernel
of the generated module at `path` for the values' types without running any program (an empty program
range), under the same cross-process file lock as an in-process compile, and replies
`(None or the error's text, seconds)`. numba stores the machine code in its cache beside the module.
"""

from __future__ import annotations

import os
import sys
import time


def _compile(path: str, module_name: str, function: str, arguments: list) -> None:
    import numpy as np

    from .executable import _compile_lock, _import_file

    module = sys.modules.get(module_name) or _import_file(module_name, path)
    kernel = getattr(module, function)
    with _compile_lock(path):
        kernel(0, 0, 1, 1, 1, *arguments, np.zeros(4, np.int64))


def main() -> int:
    from .background import read_message, write_message

    replies = os.fdopen(os.dup(sys.stdout.fileno()), "wb")
    os.dup2(sys.stderr.fileno(), sys.stdout.fileno())  # a stray print must not corrupt the replies
    requests = sys.stdin.buffer
    while True:
        request = read_message(requests)
        if request is None:
            return 0
        began = time.perf_counter()
        try:
            _compile(*request)
            error = None
        except Exception as failure:  # noqa: BLE001 - reported to the parent, which compiles in-process
            error = f"{type(failure).__name__}: {failure}"
        try:
            write_message(replies, (error, time.perf_counter() - began))
        except (BrokenPipeError, OSError):
            pass  # the parent has exited (or stopped listening): keep compiling what it handed over


if __name__ == "__main__":
    sys.exit(main())

"""Errors raised by the DSL.

`CompilationError` is what users see for anything wrong in a kernel's source or in a launch: it carries
the file, line, column, the source line and a caret under the offending column.
`DSLError` is raised by the semantic layer (which knows nothing of source locations); the frontend
catches it and re-raises a `CompilationError` at the AST node being compiled.
`KernelRuntimeError` is raised by backends for faults while a kernel runs (out-of-bounds accesses,
failed device asserts); it names the kernel line.
"""

from __future__ import annotations


class DSLError(Exception):
    """A semantic error without a source location (converted by the frontend)."""


class CompilationError(Exception):
    """A kernel could not be compiled or launched.

    Attributes: `filename`, `lineno` (1-based), `col` (0-based), `source_line`, `msg`.
    """

    def __init__(
        self,
        msg: str,
        filename: str | None = None,
        lineno: int | None = None,
        col: int | None = None,
        source_line: str | None = None,
        kernel: str | None = None,
    ):
        self.msg = msg
        self.filename = filename
        self.lineno = lineno
        self.col = col
        self.source_line = source_line
        self.kernel = kernel
        super().__init__(self._format())

    def _format(self) -> str:
        if self.filename is None or self.lineno is None:
            return self.msg
        where = (
            f'File "{self.filename}", line {self.lineno}, column {self.col if self.col is not None else 0}'
        )
        if self.kernel:
            where += f", in {self.kernel}"
        out = [where]
        if self.source_line is not None:
            line = self.source_line.rstrip("\n")
            stripped = line.lstrip()
            indent = len(line) - len(stripped)
            out.append("    " + stripped)
            if self.col is not None:
                out.append("    " + " " * max(0, self.col - indent) + "^")
        out.append(f"CompilationError: {self.msg}")
        return "\n".join(out)


class LaunchError(CompilationError, TypeError):
    """Wrong argument count or type when launching a kernel (also a TypeError, like Python calls)."""


class KernelRuntimeError(RuntimeError):
    """A fault while a kernel runs (out-of-bounds memory access, failed `device_assert`)."""

"""Fast paths of the matmul overloads (mm, bmm, addmm and their `out=` forms) for small operands.

`FAST_PATHS` maps aten overload names to fast paths (see `_fastpath`); `table` merges it into its
entries.
"""

from __future__ import annotations

from ._fastpath import FastPath

FAST_PATHS: dict[str, FastPath] = {}

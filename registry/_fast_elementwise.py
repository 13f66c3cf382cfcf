"""Fast paths of the elementwise overloads that `_fastpath` does not cover: `out=` forms, in-place
comparisons, rounding divisions, elementwise backward ops, tensor clamps and fills.

`FAST_PATHS` maps aten overload names to fast paths (see `_fastpath`); `table` merges it into its
entries.
"""

from __future__ import annotations

from ._fastpath import FastPath

FAST_PATHS: dict[str, FastPath] = {}

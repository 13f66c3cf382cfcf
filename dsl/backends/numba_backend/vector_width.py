"""512-bit vectors for the generated kernels whose lane loops are long enough to fill them.

Why: LLVM's x86 tuning for AVX-512 server cores (Skylake-X and later) sets `prefer-256-bit`, so the
loop vectoriser fills 8 float lanes on a CPU that has 16. numba offers no per-function switch, only the
process-wide `NUMBA_CPU_FEATURES`, which would also change every other numba user's code in the
process. LLVM itself reads a per-function override, the `"prefer-vector-width"` function attribute (as
clang's `-mprefer-vector-width=`), so a kernel compiled through `WideVectorCompiler` carries it and
nothing else does. Measured on this project's loops (numba 0.68, 1 thread, ns per element, 256 / 512):
a flat SiLU loop 0.56 / 0.43, a 128 x 64 softmax exp tile 0.55 / 0.35; by lane-loop length, an exp
of an affine map at 32 lanes 0.60 / 0.56, 48 lanes 0.60 / 0.47, 64 lanes 0.61 / 0.38, but a
memory-bound 16-lane multiply-add 0.25 / 0.30: a 16-float vector loop unrolled by the vectoriser
never runs on 16-lane rows, so `prefers_wide_vectors` asks for it only where every lane loop of
the kernel is long (`WIDE_LANES`). On a CPU without AVX-512 the attribute changes nothing (LLVM's
widest vector is the preference's ceiling, not its floor).
"""

from __future__ import annotations

import re

from numba.core import lowering
from numba.core.compiler import CompilerBase, DefaultPassBuilder
from numba.core.compiler_machinery import register_pass
from numba.core.typed_passes import NativeLowering

WIDTH_BITS = 512
WIDE_LANES = 64  # the shortest lane loop (innermost, constant or box-bounded) that gains from 512 bits

_ATTRIBUTE = f'"prefer-vector-width"="{WIDTH_BITS}"'
_LOOP = re.compile(r"^(\s*)for \w+ in range\((\w+)\):\s*$")
_LANES = re.compile(r"^lanes(\d+)$")
_BOX_COUNT = re.compile(r"^\s*(c\d+) = (?:max\(0, min\((\d+), |lanes(\d+)$)")


class _WideLower(lowering.Lower):
    """numba's lowering, with the vector-width attribute on the function it defines. llvmlite's
    `FunctionAttributes` admits only enum attributes; a key-value string attribute is written as it
    will appear in the IR text, so it goes into the set beside them unchecked."""

    def setup_function(self, fndesc) -> None:
        super().setup_function(fndesc)
        set.add(self.function.attributes, _ATTRIBUTE)


@register_pass(mutates_CFG=True, analysis_only=False)
class _WideNativeLowering(NativeLowering):
    _name = "torch_rbln_wide_native_lowering"

    @property
    def lowering_class(self) -> type[lowering.Lower]:
        return _WideLower


class WideVectorCompiler(CompilerBase):
    """numba's nopython pipeline with `_WideNativeLowering` in place of its lowering pass; given to
    `numba.njit(pipeline_class=...)` by the kernels `prefers_wide_vectors` picks."""

    def define_pipelines(self) -> list:
        pipeline = DefaultPassBuilder.define_nopython_pipeline(self.state)
        pipeline.passes = [(_WideNativeLowering if cls is NativeLowering else cls, text)
                           for cls, text in pipeline.passes]
        pipeline.finalize()
        return [pipeline]


def lane_loop_lengths(body: list[str]) -> list[int | None]:
    """The trip count of every innermost loop of `body` (generated lines): a literal, a hidden short
    count (`lanesN`, `short_loops`) or a box count (`cK = max(0, min(N, ...))`, at most N, or `cK =
    lanesN`); None where it is unknown."""
    bounds: dict[str, int] = {}
    lengths: list[int | None] = []
    for index, line in enumerate(body):
        box = _BOX_COUNT.match(line)
        if box is not None:
            bounds[box.group(1)] = int(box.group(2) or box.group(3))
        loop = _LOOP.match(line)
        if loop is None or not _innermost(body, index, len(loop.group(1))):
            continue
        count = loop.group(2)
        lanes = _LANES.match(count)
        lengths.append(int(count) if count.isdigit() else int(lanes.group(1)) if lanes else bounds.get(count))
    return lengths


def _innermost(body: list[str], index: int, indent: int) -> bool:
    for line in body[index + 1:]:
        if not line.strip():
            continue
        if len(line) - len(line.lstrip()) <= indent:
            return True
        if _LOOP.match(line):
            return False
    return True


def prefers_wide_vectors(body: list[str]) -> bool:
    """Whether a kernel gains from 512-bit vectors: it has lane loops, and every one of known length
    runs at least `WIDE_LANES` lanes."""
    lengths = lane_loop_lengths(body)
    known = [length for length in lengths if length is not None]
    return bool(lengths) and all(length >= WIDE_LANES for length in known)

"""numba's variable liveness analysis (`numba.core.analysis.compute_live_map`) on bit sets.

Why: numba recomputes liveness after nearly every pass of its pipeline (`postproc.PostProcessor`,
~9 times per function), and its fix-point unions Python sets of variable names along every CFG edge.
Generated kernels have hundreds of blocks and thousands of variables (after SSA), so those unions grew
with blocks x variables: a quarter of the compile time of an attention kernel (2.5 s of 9.7 s) and
about a tenth of a small elementwise one. Here each set is a Python int with one bit per variable, so
a union is one big-int OR.

The result is the same least fixed point as numba's (both iterate monotone unions from the same start
until nothing changes), returned in the same form (a dict of sets of names per block, in the order of
`blocks`). `install()` replaces numba's function only when its source is the one this module was
written against (numba 0.68's, hashed in `_EXPECTED_SOURCE`); any other numba keeps its own.
`tests/dsl/backends/test_numba_liveness.py` compares both on the IR of generated kernels.
"""

from __future__ import annotations

import hashlib
import inspect

# sha256 of the source of numba.core.analysis.compute_live_map this replacement reproduces
_EXPECTED_SOURCE = "713c4c094977e93b7ade48a478eb9b94168786ad9b440906b8e95b7fc0487a2a"
_installed: list = []


def compute_live_map(cfg, blocks, var_use_map, var_def_map) -> dict:
    """Variables that must be alive at the entry of each block (numba's contract): a variable used in
    a block, or live at a successor's entry, whose definition can reach the block, unless the block
    defines it first."""
    bit: dict[str, int] = {}

    def to_bits(names) -> int:
        value = 0
        for name in names:
            position = bit.get(name)
            if position is None:
                position = bit[name] = len(bit)
            value |= 1 << position
        return value

    topo_order = cfg.topo_order()
    defined = {offset: to_bits(names) for offset, names in var_def_map.items()}
    used = {offset: to_bits(names) for offset, names in var_use_map.items()}

    # definitions (and uses) reachable at each block's entry: forward, in topological order
    reach: dict = {}
    successors = {offset: [dest for dest, _ in cfg.successors(offset)] for offset in topo_order}
    changed = True
    while changed:
        changed = False
        for offset in topo_order:
            old = reach.get(offset, 0)
            here = old | defined[offset] | used[offset]
            if here != old:
                reach[offset] = here
                changed = True
            for dest in successors[offset]:
                before = reach.get(dest, 0)
                after = before | here
                if after != before:
                    reach[dest] = after
                    changed = True

    # liveness: backward from the uses
    live = {offset: used[offset] for offset in blocks.keys()}
    predecessors = {offset: [src for src, _ in cfg.predecessors(offset)] for offset in topo_order}
    changed = True
    while changed:
        changed = False
        for offset in reversed(topo_order):
            live_here = live[offset]
            for src in predecessors[offset]:
                before = live[src]
                after = before | (live_here & reach.get(src, 0) & ~defined[src])
                if after != before:
                    live[src] = after
                    changed = True

    names = list(bit)
    return {offset: _names(value, names) for offset, value in live.items()}


def _names(value: int, names: list[str]) -> set[str]:
    """The names whose bits are set in `value`."""
    found = set()
    text = format(value, "b")[::-1]
    position = text.find("1")
    while position >= 0:
        found.add(names[position])
        position = text.find("1", position + 1)
    return found


def _source_digest(function) -> str:
    return hashlib.sha256(inspect.getsource(function).encode()).hexdigest()


def install() -> bool:
    """Make numba use `compute_live_map` (its analysis module and ir_utils, which imported it by
    name); False, changing nothing, where numba's own function is not the one reproduced here."""
    if _installed:
        return True
    from numba.core import analysis, ir_utils

    original = analysis.compute_live_map
    try:
        digest = _source_digest(original)
    except (OSError, TypeError):
        return False
    if digest != _EXPECTED_SOURCE or ir_utils.compute_live_map is not original:
        return False
    analysis.compute_live_map = compute_live_map
    ir_utils.compute_live_map = compute_live_map
    _installed.append(original)
    return True


def original_compute_live_map():
    """numba's own function (for the differential test), whether or not `install` replaced it."""
    from numba.core import analysis

    return _installed[0] if _installed else analysis.compute_live_map

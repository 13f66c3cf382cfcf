"""Lane loops of 16 to 63 lanes get a trip count LLVM cannot see, so that its loop vectoriser takes them.

Why: numba hands LLVM `for j in range(16):` with a constant trip count. LLVM's full unroller runs before
the loop vectoriser and flattens such a short loop into 16 copies of its body; numba leaves the SLP
vectoriser off, so the copies then run one lane at a time. Measured on this project's 2-D tiles (16
rows, numba 0.68, 1 thread), ns per element, constant vs runtime trip count:

    lanes   exp32 (softmax)   subtract   masked load   causal select
      8       4.3 / 4.3       0.27 / 0.32  0.27 / 0.31   0.22 / 0.23
     16       4.3 / 0.53      0.27 / 0.07  0.27 / 0.06   0.17 / 0.07
     32       0.51 / 0.44     0.27 / 0.05  0.27 / 0.05   0.10 / 0.05
     64       0.43 / 0.46     0.04 / 0.05  0.04 / 0.05   0.05 / 0.05

Eight lanes are too few to vectorise either way and 64 are past the unroller's budget, so only
16..63 change. The demo's attention forward (2 x 4 heads, 16 x 16 tiles) went from 59 to 27 us.

How: every `for j in range(N):` of the kernel body with N in that band reads its count from
`lanesN = np.int64(N) if g0 > 0 else np.int64(N + 1)`, set once before the program loop. Inside the
program loop g0 > 0 always holds (a program id exists only in a grid of at least one program), so the
count is N exactly where the body runs: the same iterations, only hidden from constant folding. A box
count that folds to such an N (`c1 = max(0, min(32, np.int64(32)))`: a mask `lanes < 32` written with a
literal bound, as the compiler's fused cat kernels and many Triton kernels write it) gets `lanesN` too:
the loops over that box count to it.
"""

from __future__ import annotations

import re

SHORTEST = 16  # fewer lanes: full unrolling costs nothing (table above)
LONGEST = 63  # more lanes: LLVM does not unroll them fully anyway

_LOOP = re.compile(r"^(\s*for \w+ in range\()(\d+)(\):\s*)$")
_BOX_COUNT = re.compile(r"^(\s*c\d+ = )max\(0, min\((\d+), np\.int64\((-?\d+)\)\)\)\s*$")


def hide_short_trip_counts(body: list[str]) -> tuple[list[str], list[str]]:
    """`body` (the lines inside the program loop) with each short constant lane loop counting to a
    `lanesN` variable, and the prologue lines that define those variables (empty when none is used)."""
    counts: set[int] = set()
    rewritten = []
    for line in body:
        match = _LOOP.match(line)
        if match is not None and SHORTEST <= int(match.group(2)) <= LONGEST:
            count = int(match.group(2))
            counts.add(count)
            line = f"{match.group(1)}lanes{count}{match.group(3)}"
        box = _BOX_COUNT.match(line)
        if box is not None and SHORTEST <= min(int(box.group(2)), int(box.group(3))) <= LONGEST:
            count = min(int(box.group(2)), int(box.group(3)))
            counts.add(count)
            line = f"{box.group(1)}lanes{count}"
        rewritten.append(line)
    prologue = [f"lanes{n} = np.int64({n}) if g0 > 0 else np.int64({n + 1})" for n in sorted(counts)]
    return rewritten, prologue

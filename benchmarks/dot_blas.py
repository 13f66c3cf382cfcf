"""Why scipy is a dependency: `tl.dot` tiles through BLAS gemm (numba's `np.dot`, which binds scipy's
BLAS) against the lightest alternative, a gemm written as numba loops (no scipy), per tile shape.

    python benchmarks/dot_blas.py

Prints microseconds per product (best of 3) and the loops/BLAS ratio: a ratio near 1 would mean scipy
(about 140 MB installed) could go. Both run with one BLAS thread, as kernels do.
"""

from __future__ import annotations

import os
import time

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

import numba  # noqa: E402
import numpy as np  # noqa: E402

SHAPES = [(16, 16, 16), (32, 32, 32), (64, 64, 64), (128, 64, 128), (128, 128, 128), (256, 256, 256)]


@numba.njit(nogil=True)
def _with_blas(a: np.ndarray, b: np.ndarray, repeats: int) -> float:
    checksum = 0.0
    for _ in range(repeats):
        checksum += np.dot(a, b)[0, 0]
    return checksum


@numba.njit(nogil=True)
def _with_loops(a: np.ndarray, b: np.ndarray, repeats: int) -> float:
    rows, inner = a.shape
    cols = b.shape[1]
    product = np.empty((rows, cols), np.float32)
    checksum = 0.0
    for _ in range(repeats):
        for i in range(rows):
            for j in range(cols):
                product[i, j] = 0
            for k in range(inner):
                scale = a[i, k]
                for j in range(cols):
                    product[i, j] += scale * b[k, j]
        checksum += product[0, 0]
    return checksum


def _best_us(function, a: np.ndarray, b: np.ndarray, repeats: int) -> float:
    function(a, b, 1)  # compile
    best = float("inf")
    for _ in range(3):
        began = time.perf_counter()
        function(a, b, repeats)
        best = min(best, (time.perf_counter() - began) / repeats)
    return best * 1e6


def main() -> None:
    rng = np.random.default_rng(0)
    print(f"{'tile (MxKxN)':>14} {'BLAS us':>9} {'loops us':>9} {'loops/BLAS':>11}")
    for m, k, n in SHAPES:
        a = rng.random((m, k), dtype=np.float32)
        b = rng.random((k, n), dtype=np.float32)
        repeats = max(1, int(2e7 / (m * n * k)))
        blas, loops = _best_us(_with_blas, a, b, repeats), _best_us(_with_loops, a, b, repeats)
        print(f"{m:>4}x{k}x{n:<6} {blas:>9.2f} {loops:>9.2f} {loops / blas:>11.2f}")


if __name__ == "__main__":
    main()

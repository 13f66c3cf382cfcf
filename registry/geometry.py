"""Geometry of the registry's launches: block sizes, tiles, and the collapsed shapes and strides of
strided operands. Pure arithmetic on ints and shapes (no kernel, DSL or numba import), shared by every
op family.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

from ._base import Decline

I32 = 2**31  # ints below this are int32 kernel arguments (another specialisation above)


def next_power_of_2(n: int) -> int:
    """Smallest power of two >= n (1 for n <= 1), as `torch_rbln.dsl.next_power_of_2`."""
    return 1 if n <= 1 else 1 << (n - 1).bit_length()


def cdiv(a: int, b: int) -> int:
    return -(-a // b)


def block(n: int) -> int:
    """Elementwise block size by size; three buckets keep the number of specialisations small."""
    if n <= 16:
        return 16
    if n <= 1024:
        return 1024
    return 4096


def column_block(columns: int) -> int:
    """Lanes of a kernel whose lanes are the columns of a middle-dim walk (the middle-dim reductions,
    scatter): the smallest of 16, 64, 256, 1,024 and 4,096 that holds them, so at most 4x the columns
    below 4,096. `block`'s three buckets gave 64 columns 1,024 lanes: a max over dim 1 of (64, 64, 64)
    ran 16x the lanes it needed (1.5 ms, the CPU 0.4); five buckets keep the specialisations few."""
    return next((size for size in (16, 64, 256, 1024) if columns <= size), 4096)


FUSED_BLOCK = 4096


def fused_block(n: int, fused: bool) -> int:
    """BLOCK of a flat elementwise launch over `n` elements: `FUSED_BLOCK` for every `n` when `fused`
    (a specialisation whose loads, arithmetic and store the numba backend fuses into one loop over the
    lanes that exist: `kernels.elementwise.FUSED_UNARY` and `FUSED_BINARY`), else `block(n)`.

    Why: a fused specialisation's BLOCK only bounds that loop (a clamp, no buffer), so a 4-element and
    a 4096-element launch cost the same per element under either BLOCK, and one grid program covers
    up to `FUSED_BLOCK` elements either way; `block`'s three buckets only made up to three compiles of
    the same code (the README demo compiled the fill and add ones twice each). A specialisation that
    uses a value twice (relu's where) or switches on a runtime op materialises BLOCK-long buffers and
    fills their masked lanes on every launch, so it keeps `block`'s buckets. (The interpret backend
    computes every lane: a tiny launch there costs a few us more.)"""
    return FUSED_BLOCK if fused else block(n)


ONE_BLOCK = 4096  # rows up to this long are processed in one block (one load per element)
# From this many elements on, copies (cat's parts too) and where/masked_fill run tiled kernels
# (`tiled_copy_kernel`, `where_tiled_kernel`): the flat kernels find each element's place by dividing
# its index by the sizes, ~30 ns per element.
TILED_MIN = 4096
TILE_ELEMENTS = 4096  # elements per tile of a tiled kernel over rows


def tile_shape(rows: int, columns: int) -> tuple[int, int]:
    """(BLOCK_M, BLOCK_N) of a tiled kernel over `rows` x `columns`: runs of up to 1024 elements of a
    row, and several rows per tile when they are short, so a tile holds up to 4096 elements."""
    block_n = min(1024, next_power_of_2(columns))
    return max(1, min(next_power_of_2(rows), TILE_ELEMENTS // block_n)), block_n


def small_tile_shape(n: int, rows: int, columns: int) -> tuple[int, int]:
    """`tile_shape` for `n` elements in all, where below TILED_MIN a layout takes one of four tiles
    instead of one per power of two of its sizes: each tile is a specialisation (a compile of seconds
    for the generic op switch), and the OpInfo samples' odd small shapes took ~60 of them."""
    if n >= TILED_MIN:
        return tile_shape(rows, columns)
    return few_tile_shape(rows, columns)


def few_tile_shape(rows: int, columns: int) -> tuple[int, int]:
    """One of four tiles for any `rows` x `columns` (`small_tile_shape`'s below TILED_MIN): a layout whose
    sizes move (a key/value cache growing a row per decoding step) keeps one specialisation."""
    if rows == 1:
        return 1, 16 if columns <= 16 else 1024
    return (64, 16) if columns <= 16 else (16, 64)


ROW_CHUNK = 1024  # block of the chunked row kernels for longer rows (measured faster than 4096 there)


def row_block(n: int) -> int:
    """The block of a row kernel over rows of `n` elements: one of four sizes, so few specialisations
    cover every length. Short rows (a 4-element layer norm's) get a block of 16: each program of a
    row kernel loops over its whole block several times, which a block of 128 made cost ~1 us a launch
    on a few tiny rows."""
    if n <= 16:
        return 16
    if n <= 128:
        return 128
    if n <= 1024:
        return 1024
    return 4096


def collapse(shape: Sequence[int], strides_list: list[list[int]]) -> tuple[list[int], list[list[int]]]:
    """Merge adjacent dims that are contiguous with each other in every operand; drop size-1 dims."""
    dims = [i for i, s in enumerate(shape) if s != 1]
    out_shape: list[int] = []
    out_strides: list[list[int]] = [[] for _ in strides_list]
    for i in dims:
        if out_shape and all(st[-1] == strides[i] * shape[i] for st, strides in zip(out_strides, strides_list,
                                                                                    strict=True)):
            out_shape[-1] *= shape[i]
            for st, strides in zip(out_strides, strides_list, strict=True):
                st[-1] = strides[i]
            continue
        out_shape.append(shape[i])
        for st, strides in zip(out_strides, strides_list, strict=True):
            st.append(strides[i])
    return out_shape, out_strides


def expanded_strides(t: torch.Tensor, shape: Sequence[int]) -> list[int]:
    """The strides that read `t` broadcast to `shape` (0 on broadcast dims)."""
    return broadcast_strides(t.shape, t.stride(), shape)


def broadcast_strides(sizes: Sequence[int], strides: Sequence[int], shape: Sequence[int]) -> list[int]:
    """`expanded_strides` of a layout (`sizes`, `strides`), for plans that decide from a key's sizes and
    strides: a meta tensor made to ask a tensor took ~20 us of such a plan's build."""
    nd = len(shape)
    result = [0] * nd
    offset = nd - len(sizes)
    for i, (size, stride) in enumerate(zip(sizes, strides, strict=True)):
        if offset + i >= 0:  # extra leading dims are size 1 (a 1-element scalar operand)
            result[offset + i] = stride if size != 1 else 0
    return result


def reduced_dims(nd: int, dim: int | Sequence[int] | None) -> list[int]:
    """The sorted, wrapped dims of a tensor of `nd` dims that a reduction's `dim` names: every dim for
    None or an empty list (torch's convention). A dim out of range raises `Decline` (the CPU kernel then
    raises torch's IndexError)."""
    if dim is None or (not isinstance(dim, int) and len(dim) == 0):
        return list(range(nd))
    width = max(nd, 1)
    wrapped = set()
    for d in (dim,) if isinstance(dim, int) else dim:
        if not -width <= d < width:
            raise Decline(f"dim {d} out of range")
        wrapped.add(d % width)
    return sorted(wrapped) if nd else []


def reduced_shape(shape: Sequence[int], dims: Sequence[int], keepdim: bool) -> tuple:
    """The result shape of reducing `dims` (wrapped) of `shape`."""
    if keepdim:
        return tuple(1 if i in dims else size for i, size in enumerate(shape))
    return tuple(size for i, size in enumerate(shape) if i not in dims)


def dims_run(nd: int, dims: Sequence[int]) -> tuple[int, int] | None:
    """(first, last) when the sorted `dims` are the run first..last-1 (all `nd` dims when empty); None
    when they are scattered."""
    if not dims:
        return 0, nd
    first, last = dims[0], dims[-1] + 1
    return (first, last) if last - first == len(dims) else None


def row_stride(shape: tuple, strides: tuple, dim: int) -> int | None:
    """The elements between consecutive rows of a tensor of `shape` and `strides` seen as (rows: the
    dims before `dim`, a row: the dims from `dim` on) when each row is contiguous and the rows are
    equally spaced (RoPE's `q[..., :d]` of a contiguous q: rows twice their length apart); None
    otherwise. A contiguous tensor's is its row length; with `dim` = its number of dims, the stride
    between its consecutive elements read in order as one line (`ids[:, -1]`, a column)."""
    inner = 1
    for size, stride in zip(reversed(shape[dim:]), reversed(strides[dim:]), strict=True):
        if size != 1 and stride != inner:
            return None
        inner *= size
    step = None
    expected = None
    for size, stride in zip(reversed(shape[:dim]), reversed(strides[:dim]), strict=True):
        if size == 1:
            continue
        if step is None:
            step, expected = stride, stride * size
        elif stride != expected:
            return None
        else:
            expected *= size
    return inner if step is None else step

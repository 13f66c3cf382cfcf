"""The reduction family: sum, mean, amax/amin, max/min with indices, argmax/argmin, var/std over any
set of dims, and its plans (one per call signature, `plan.py`).

The reduced dims decide the kernel, so no case needs a transposing copy unless the dims are scattered:
- trailing dims (or all dims): the row kernel (`kernels/rows.py`), one program per output element;
- one contiguous run of dims in the middle or at the front: the (outer, r, inner) kernel
  (`kernels/reduce.py`), which reads the reduced rows in place with contiguous vector loads;
- scattered dims (`dim=(0, 2)` of a 3-d tensor): the kept dims are permuted to the front and copied
  once by the strided copy kernel, then the row kernel reduces the trailing block.

`decide` makes that choice (kernel, launch key, grid, int arguments) for a contiguous tensor whose
reduced dims are one run; the checked implementation (`reduce`) and the plans (`family`) both launch
what it decides, so they launch the same specialisation with the same arguments.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import torch
from torch import Tensor

from torch_rbln import _memory, config
from torch_rbln.tp import device_tp, requested_backend

from . import _launch as launches
from ._base import INTEGERS, require_float
from ._finite_scan import PARALLEL_MIN, all_finite, contiguous_scan
from ._ops import FLOATS, Decline, _device_index, _k, cast_copy, contiguous, empty
from .geometry import (
    I32,
    block,
    cdiv,
    column_block,
    dims_run,
    reduced_dims,
    reduced_shape,
    row_block,
    row_stride,
)
from .plan import NO_PLAN, Direct, Family, Launch, Plan, contiguous_rbln, unscanned

CODES = {"sum": 0, "mean": 1, "max": 2, "min": 3, "argmax": 4, "argmin": 5, "var": 6, "amax": 2, "amin": 3,
         "all": 7, "any": 8, "std": 9}
LOGICAL = ("all", "any")  # exact on every dtype (a count of non-zero elements): never scanned
# exact on NaN/Inf too, so never scanned: the kernels select an element (no arithmetic) and write
# torch's NaN (propagated; its index the first NaN's) and infinities (compared as values); a row of
# -inf gives index 0, as torch's first-occurrence rule does. Greedy decoding's argmax over logits that a
# processor set to -inf (min_new_tokens, bad words) stays on the device.
EXTREMES = ("max", "min", "argmax", "argmin", "amax", "amin")
UNSCANNED = (*LOGICAL, *EXTREMES)
INDEXED = ("max", "min", "argmax", "argmin")  # dim is one int; amax/amin take several dims


def row_key(dtype: torch.dtype, values_dtype: torch.dtype, indices_dtype: torch.dtype, op: int, r: int, *,
            write_index: bool) -> tuple[tuple, dict]:
    """(launch key, constexpr keywords) of the row kernel `reduce_kernel` reducing rows of `r` elements
    of `dtype` with op code `op` into values/indices of the given dtypes, storing indices when
    `write_index` (max/min with indices, argmax/argmin; not amax/amin, nor sum/mean/var). The key holds
    every constexpr, so it determines the specialisation."""
    size = row_block(r)
    key = (dtype, values_dtype, indices_dtype, op, write_index, size, r < I32)
    return key, {"OP": op, "WRITE_INDEX": write_index, "BLOCK": size}


def decide(op: int, write_index: bool, dtype: torch.dtype, shape: tuple, first: int, last: int,
           values_dtype: torch.dtype | None = None) -> tuple[Launch, bool]:
    """(launch, scratch) reducing dims [first, last) of a contiguous tensor of `shape` and `dtype`
    into values of `values_dtype` (x's by default; bool or uint8 for all/any), indices int64 when
    `write_index`: `kernel[(programs, rows)](x, values, indices, *ints, correction, **keywords)`;
    `scratch`: the middle kernel needs an index buffer nobody reads (amax/amin)."""
    values_dtype = dtype if values_dtype is None else values_dtype
    outer = math.prod(shape[:first])
    r = math.prod(shape[first:last])
    inner = math.prod(shape[last:])
    if inner == 1:
        key, keywords = row_key(dtype, values_dtype, torch.int64 if write_index else values_dtype, op, r,
                                write_index=write_index)
        return Launch(_k("rows").reduce_kernel, key, keywords, outer, 1, (r,)), False
    # the middle kernel's max/min always store an index: amax/amin give it a scratch buffer
    scratch = not write_index and (op == CODES["max"] or op == CODES["min"])
    size = column_block(inner)
    key = ("middle", dtype, values_dtype, torch.int64 if write_index or scratch else values_dtype, op, size,
           r < I32, inner < I32)
    return Launch(_k("reduce").middle_reduce_kernel, key, {"OP": op, "BLOCK": size}, outer, cdiv(inner, size),
                  (r, inner)), scratch


# ---------------------------------------------------------------- the checked implementation

def reduce(name: str, x: Tensor, dim=None, keepdim=False, dtype=None, correction=None):
    """`name` over `dim` of `x`: the values, (values, indices) for max/min, indices for argmax/argmin.

    `dim` follows the aten schema of each op: an int for max/min/argmax/argmin (None: all elements,
    flattened), an int list for the others (None or empty: all dims)."""
    if x.dtype in INTEGERS and name in _INTEGER_EXTREMES:
        if dtype is not None and dtype != x.dtype:
            raise Decline("dtype= conversion")
        return integer_reduce(name, x, dim, keepdim, x.dtype)
    if name == "sum" and x.dtype in _SUMMED_AS_INT64:
        if dtype is not None and dtype != torch.int64:
            raise Decline("dtype= conversion")
        return integer_reduce(name, x, dim, keepdim, torch.int64)
    require_float(x.dtype)
    if dtype is not None and dtype != x.dtype:
        raise Decline("dtype= conversion")
    if x.numel() == 0:
        raise Decline("empty tensor")
    return _reduced(name, x, dim, keepdim, correction, x.dtype)


def logical(name: str, x: Tensor, dim=None, keepdim=False) -> Tensor:
    """`all`/`any` over `dim` (an int list; None: every dim; empty: none, elementwise): whether every /
    some element is non-zero, as bool (uint8 for a uint8 input, as torch). NaN counts as non-zero, as
    in torch: the kernels count `x != 0` (exact for every value, NaN and Inf included, so the op needs
    no NaN/Inf scan and a -inf attention mask stays on the device), for x of any real dtype."""
    if x.is_complex():
        raise Decline("complex input")
    if x.numel() == 0:
        raise Decline("empty tensor")
    result_dtype = torch.uint8 if x.dtype is torch.uint8 else torch.bool
    if dim is not None and len(dim) == 0:  # all.dims(x, []) reduces nothing: x != 0, elementwise
        from .elementwise import binary  # the elementwise family does not import this one

        flags = x if x.dtype is torch.bool else binary("ne", x, 0, comparison=True)
        return cast_copy(flags, result_dtype)
    return _reduced(name, x, dim, keepdim, None, result_dtype)


# The most compares `isin`'s broadcast form materialises (a bool each: 4 MiB); larger calls take the
# CPU, whose kernel sorts instead.
ISIN_LIMIT = 1 << 22


def isin(elements, test_elements, *, assume_unique: bool = False, invert: bool = False) -> Tensor:
    """`torch.isin` as torch's CPU kernel computes it for few test elements: each element compared with
    every test element (one broadcast `eq` launch: the comparison kernels' promotion, NaN equal to
    nothing) and `any` over the test elements (one launch); `invert` negates. Exact, so the op needs no
    NaN/Inf scan. Hugging Face's generate calls it once per token (`isin(last_tokens, eos_token_ids)`).
    `assume_unique` changes nothing here: it only lets torch's sorting form skip work."""
    from .elementwise import binary  # the elementwise family does not import this one
    from .integer import bitwise_not

    if not isinstance(elements, Tensor) or elements.is_cpu:
        raise Decline("isin of a number")
    n = elements.numel()
    if isinstance(test_elements, Tensor):
        if test_elements.is_cpu and test_elements.dim():
            raise Decline("CPU tensor operand")
        m = test_elements.numel()
    elif isinstance(test_elements, (bool, int, float)):
        m = 1
    else:
        raise Decline("non-real test element")
    if n == 0 or m == 0:
        raise Decline("empty tensor")
    if n * m > ISIN_LIMIT:
        raise Decline(f"isin of {n} x {m} elements (above {ISIN_LIMIT} compares)")
    if elements.dtype not in ISIN_DTYPES:
        raise Decline(f"isin of {str(elements.dtype).replace('torch.', '')}")  # torch's error (bool) or CPU
    same = isinstance(test_elements, Tensor) and test_elements.dtype is elements.dtype
    if same and not test_elements.is_cpu and m <= ISIN_KERNEL_TESTS:
        index = _device_index(elements, test_elements)
        found = empty(elements.shape, torch.bool, index)
        stride = row_stride(tuple(elements.shape), elements.stride(), elements.dim())
        if stride is None:
            elements, stride = contiguous(elements), 1
        launch = isin_launch(elements.dtype, n, m, stride, invert)
        launches.launch_decided(launch, (elements, contiguous(test_elements), found, *launch.ints))
        return found
    if isinstance(test_elements, Tensor) and (m > 1 or test_elements.dim()):
        hits = binary("eq", elements.reshape(n, 1), test_elements.reshape(1, m), comparison=True)
        found = logical("any", hits, [1])
    else:
        found = binary("eq", elements.reshape(n), test_elements, comparison=True)
    found = found.view(elements.shape)
    return bitwise_not(found) if invert else found


ISIN_DTYPES = (*FLOATS, torch.uint8, torch.int8, torch.int16, torch.int32, torch.int64)
# The most test elements `isin_kernel` takes: it compares every lane of a block with each test element
# in turn, so many test elements against a few elements waste most lanes; the broadcast compare and
# `any` run those (a vocabulary-sized list of banned ids against one sequence's last token).
ISIN_KERNEL_TESTS = 1024


def isin_launch(dtype: torch.dtype, n: int, m: int, stride: int, invert: bool) -> Launch:
    """`isin_kernel` over `n` elements of `dtype` `stride` apart against `m` test elements of the same
    dtype; its ints (n, m, stride) follow the three tensors. One BLOCK bucket per size (`block`); no key
    (the general launch) when an int needs 64 bits."""
    size = block(n)
    ints = (n, m, stride)
    key = (dtype, invert, size) if max(ints) < I32 else None
    return Launch(_k("reduce").isin_kernel, key, {"INVERT": invert, "BLOCK": size}, cdiv(n, size), 1, ints)


def isin_family() -> Family:
    """`isin.Tensor_Tensor(elements, test_elements, *, assume_unique=False, invert=False)` of rbln
    tensors of one dtype on one device, the elements read as one line (`row_stride` over every dim:
    contiguous, or a column), the test elements contiguous: one `isin_kernel` launch into a new bool
    tensor. Exact, so nothing is scanned; other dtypes, CPU test elements and more than ISIN_LIMIT
    compares are the implementation's."""

    def signature(args: tuple, kwargs: dict) -> tuple | None:
        if len(args) != 2:
            return None
        invert = False
        for key, value in kwargs.items():
            if key == "invert" and type(value) is bool:
                invert = value
            elif key != "assume_unique" or type(value) is not bool:
                return None
        x, t = args
        index = contiguous_rbln(t)
        if index < 0 or not isinstance(x, Tensor) or x.get_device() != index or t.dtype is not x.dtype or \
                x.dtype not in ISIN_DTYPES:
            return None
        stride = row_stride(tuple(x.shape), x.stride(), x.dim())
        if stride is None:
            return None
        # a column's stride is a runtime value, not part of the key: `isin(ids[:, -1], eos)` reads a
        # column of ids that grow by a token every step, a new stride every step
        return (x.dtype, x.shape, stride == 1, t.numel(), index, invert), (x, t, stride)

    def plan(key: tuple, operands: tuple) -> Plan:
        dtype, shape, line, m, index, invert = key
        n = math.prod(shape)
        # decided for the key, not for this call's stride (each call checks its own below)
        launch = isin_launch(dtype, n, m, 1, invert)
        if n == 0 or m == 0 or m > ISIN_KERNEL_TESTS or n * m > ISIN_LIMIT or launch.key is None:
            return NO_PLAN
        plan = Plan.of(launch, tuple(shape), torch.bool, ())
        programs, new = launch.programs, _memory.allocator(shape, torch.bool, index)
        widest = I32 // n  # (n > 0 here) the largest stride whose ints fit the launch key's 32 bits

        def run(operands: tuple) -> Tensor | None:
            x, t, stride = operands
            if stride >= widest:
                return None  # 64-bit offsets: the implementation's general launch
            found = new()
            launcher = plan.launcher if plan.backend == requested_backend() else plan.kept()
            if launcher is not None and not line:
                # a column goes to the kernel over its span, first to last element (`strided`)
                launcher = getattr(launcher, "strided", None)
            if launcher is None or (programs > 1 and device_tp(index) > 1):
                plan.launch_checked((x, t, found, n, m, stride))
            else:
                launcher(programs, 1, 1, x, t, found, n, m, stride)
            return found

        plan.run = run
        return plan

    return Family(signature, plan)


def _reduced(name: str, x: Tensor, dim, keepdim: bool, correction, values_dtype: torch.dtype):
    """`reduce`'s launch (and `logical`'s): the result of `decide`'s kernel over x's `dim`, the kept
    dims moved first in one copy when the reduced ones are scattered."""
    nd = x.dim()
    dims = reduced_dims(nd, dim)
    shape = reduced_shape(tuple(x.shape), dims, keepdim)
    run = dims_run(nd, dims)
    if run is None:  # scattered dims: the kept dims first, the reduced ones last, in one copy
        kept = [d for d in range(nd) if d not in dims]
        x = cast_copy(x.permute(*kept, *dims), x.dtype)
        run = (nd - len(dims), nd)
    x = contiguous(x)
    index = x.get_device()
    write_index = name in INDEXED
    launch, scratch = decide(CODES[name], write_index, x.dtype, tuple(x.shape), *run, values_dtype)
    values = None if name in ("argmax", "argmin") else empty(shape, values_dtype, index)
    indices = empty(shape, torch.int64, index) if write_index or scratch else None
    # argmax/argmin pass `x` as the unused values pointer (the specialisation of max/min's dtypes);
    # without indices the values stand in for the index pointer (never written)
    args = (x, x if values is None else values, values if indices is None else indices, *launch.ints,
            1.0 if correction is None else float(correction))
    launches.launch(launch.kernel, launch.programs, launch.key, args, launch.keywords, rows=launch.rows)
    if name in ("argmax", "argmin"):
        return indices
    if name in ("max", "min"):
        return values, indices
    return values


_INTEGER_EXTREMES = ("amax", "amin", "max", "min", "argmax", "argmin")
# torch sums bool and integer tensors into int64 (`mask.sum(dim=1)` counts the True elements)
_SUMMED_AS_INT64 = (torch.bool, torch.uint8, torch.int8, torch.int16, torch.int32, torch.int64)


def integer_reduce(name: str, x: Tensor, dim, keepdim: bool, values_dtype: torch.dtype):
    """sum (into int64), amax/amin, max/min (values and indices) and argmax/argmin of a bool/integer
    `x`, exact: `int_row_reduce_kernel` over rows of the reduced elements (the kept dims moved first and
    the tensor made contiguous, a copy unless the reduced dims are the last ones already). Integer
    reductions are rare in models (`unfinished_sequences.max()` once per generated token), so one
    general launch and no plan."""
    if x.numel() == 0:
        raise Decline("empty tensor")  # torch's error from the CPU
    nd = x.dim()
    dims = reduced_dims(nd, dim)
    shape = reduced_shape(tuple(x.shape), dims, keepdim)
    kept = [d for d in range(nd) if d not in dims]
    rows_x = contiguous(x.permute(*kept, *dims)) if nd else x.reshape(1)
    n = math.prod(x.shape[d] for d in dims) if nd else 1
    index = x.get_device()
    op = CODES[name]
    # both outputs always exist (argmax's values and amax's indices unread), so the pointers' dtypes,
    # hence the specialisation, depend on x's dtype and the block only
    values, indices = empty(shape, values_dtype, index), empty(shape, torch.int64, index)
    launch = integer_reduce_launch(x.dtype, values_dtype, n, x.numel() // n)
    launches.launch_decided(launch, (rows_x, values, indices, n, op, int(name in INDEXED)))
    if name in ("argmax", "argmin"):
        return indices
    if name in ("max", "min"):
        return values, indices
    return values


def integer_reduce_launch(dtype: torch.dtype, values_dtype: torch.dtype, n: int, rows: int) -> Launch:
    """`int_row_reduce_kernel` over `rows` contiguous rows of `n` elements of `dtype` into values of
    `values_dtype` (and int64 indices): the tensors, then (n, op, write_index) follow. Its op is a
    runtime value, so the key is the dtypes and the block; none (the general launch) for 64-bit sizes.
    Shared by `integer_reduce` and the plans."""
    size = row_block(n)
    key = ("int_rows", dtype, values_dtype, size) if n * rows < I32 else None
    return Launch(_k("integer").int_row_reduce_kernel, key, {"BLOCK": size}, rows)


# ---------------------------------------------------------------- plans

_DIM, _KEEPDIM = 1, 2  # positions of `dim` and `keepdim` in the forms that take them positionally


def family(name: str, *, positional: int = 3, keywords: tuple = ()) -> Family:
    """The plans of one reduction overload `name(x[, dim[, keepdim]], *, <keywords>)`: at most
    `positional` positional arguments (1: `sum.default`; 2: `var.correction`, whose keepdim is a
    keyword), the keyword-only arguments `keywords` ("dtype": None only, no conversion; "correction":
    a number; "keepdim").

    A call is keyed by (dtype, shape, device, dims, keepdim) of a contiguous rbln `x`; its operands are
    `(x, correction)`. Scattered dims (a transposing copy first), an empty tensor or another dtype:
    NO_PLAN (the implementation); a dim out of range: declined (torch's error from the CPU)."""
    allowed = frozenset(keywords)

    def signature(args: tuple, kwargs: dict) -> tuple | None:
        count = len(args)
        if not 1 <= count <= positional:
            return None
        x = args[0]
        if not isinstance(x, Tensor) or not x.is_contiguous():
            return None
        index = x.get_device()
        if index < 0:
            return None
        dim = args[_DIM] if count > _DIM else None
        keepdim = args[_KEEPDIM] if count > _KEEPDIM else False
        correction = 1.0
        if kwargs:
            for key, value in kwargs.items():
                if key not in allowed:
                    return None
                if key == "keepdim":
                    keepdim = value
                elif key == "correction":
                    if value is not None:
                        kind = type(value)
                        if kind is not float and kind is not int:
                            return None
                        correction = float(value)
                elif value is not None:  # dtype=: a conversion (or its no-op) is the implementation's
                    return None
        if type(keepdim) is not bool:
            return None
        if dim is not None:
            kind = type(dim)
            if kind is int:
                dim = (dim,)
            elif kind is list or kind is tuple:
                for d in dim:
                    if type(d) is not int:
                        return None
                dim = tuple(dim)
            else:
                return None
        return (x.dtype, x.shape, index, dim, keepdim), (x, correction)

    def plan(key: tuple, operands: tuple) -> Plan:
        return _reduce_plan(name, key)

    return Family(signature, plan)


_LOGICAL_DTYPES = (*FLOATS, torch.bool, torch.uint8, torch.int8, torch.int16, torch.int32, torch.int64)


def _reduce_plan(name: str, key: tuple) -> Plan:
    dtype, shape, index, dim, keepdim = key
    shape = tuple(shape)
    numel = math.prod(shape)
    if (name in _INTEGER_EXTREMES and dtype in INTEGERS) or (name == "sum" and dtype in _SUMMED_AS_INT64):
        return _integer_reduce_plan(name, dtype, shape, numel, index, dim, keepdim)
    logical = name in LOGICAL
    if dtype not in (_LOGICAL_DTYPES if logical else FLOATS) or numel == 0 or (logical and dim == ()):
        return NO_PLAN  # (all.dims(x, []) reduces nothing: the implementation's elementwise test)
    nd = len(shape)
    dims = reduced_dims(nd, dim)  # or Decline: a dim out of range
    run = dims_run(nd, dims)
    if run is None:
        return NO_PLAN  # scattered dims: the implementation's transposing copy
    write_index = name in INDEXED
    values_dtype = (torch.uint8 if dtype is torch.uint8 else torch.bool) if logical else dtype
    launch, scratch = decide(CODES[name], write_index, dtype, shape, *run, values_dtype)
    out_shape = reduced_shape(shape, dims, keepdim)
    plan = ReducePlan(launch.kernel, launch.key, launch.keywords, launch.programs, launch.rows, out_shape,
                      values_dtype, () if name in UNSCANNED else (0,))
    plan.run = _reduce_run(plan, name, dtype, index, numel, launch.ints, scratch)
    # a compiled graph launches it directly (`direct`) where its one output is all it writes
    plan.ints = None if scratch or name in INDEXED else launch.ints
    return plan


class ReducePlan(Plan):
    """A reduction's plan; one that writes only its values (`ints`: its launch's int arguments, None
    otherwise) also describes its kept launch for a compiled graph (`direct`)."""

    __slots__ = ("ints",)

    def direct(self, operands: tuple) -> Direct | None:
        """The kept launch by address: x, the values (as the index buffer too: no index is written),
        the int arguments and this call's correction (a graph constant); one NPU's grid only."""
        by_address, correction = self.direct_launcher(operands[0].get_device()), operands[1]
        if self.ints is None or by_address is None or (type(correction) is not int and
                                                       type(correction) is not float):
            return None
        args = (("tensor", 0), ("out", None), ("out", None), *(("value", v) for v in self.ints),
                ("value", correction))
        return Direct(by_address, (self.programs, self.rows, 1), args)


def _integer_reduce_plan(name: str, dtype: torch.dtype, shape: tuple, numel: int, index: int, dim,
                         keepdim: bool) -> Plan:
    """The plan of `integer_reduce`'s launch for a contiguous bool/integer x reduced over its trailing
    dims (`unfinished_sequences.max()`, `mask.sum(-1)`: every generation step), which needs no moving
    copy: `int_row_reduce_kernel` over rows of the reduced elements, its op a runtime value, values and
    indices both allocated as there. Exact, so nothing is scanned. NO_PLAN for dims elsewhere, an empty
    x or 64-bit sizes (the implementation)."""
    nd = len(shape)
    dims = reduced_dims(nd, dim)  # or Decline: a dim out of range
    run = dims_run(nd, dims) if nd else (0, 0)
    if numel == 0 or run is None or run[1] != nd:
        return NO_PLAN
    n = math.prod(shape[run[0]:])
    rows = numel // n
    values_dtype = torch.int64 if name == "sum" else dtype
    launch = integer_reduce_launch(dtype, values_dtype, n, rows)
    if launch.key is None:
        return NO_PLAN  # 64-bit sizes: the implementation's general launch
    out_shape = reduced_shape(shape, dims, keepdim)
    plan = Plan.of(launch, out_shape, values_dtype, ())
    op, write_index = CODES[name], int(name in INDEXED)
    pair, indexed = name in ("max", "min"), name in ("argmax", "argmin")
    empty_pair = _memory.empty_pair

    def run_(operands: tuple) -> Any:
        x = operands[0]
        launcher = plan.launcher if plan.backend == requested_backend() else plan.kept()
        values, indices = empty_pair(out_shape, out_shape, values_dtype, index, torch.int64)
        if launcher is None or (rows > 1 and device_tp(index) > 1):
            plan.launch_checked((x, values, indices, n, op, write_index))
        else:
            launcher(rows, 1, 1, x, values, indices, n, op, write_index)
        return (values, indices) if pair else indices if indexed else values

    plan.run = run_
    return plan


def _reduce_run(plan: Plan, name: str, x_dtype: torch.dtype, index: int, numel: int, ints: tuple,
                scratch: bool) -> Callable[[tuple], Any]:
    shape, dtype = plan.shape, plan.dtype  # (the values' dtype: bool or uint8 for all/any)
    exact = name in UNSCANNED  # all/any, max/min and their indices are exact on every value
    scan, mask = (None, 0) if exact else contiguous_scan(x_dtype)  # (the scan inline: per-call cost)
    small = numel < PARALLEL_MIN
    empty_, empty_pair = _memory.empty, _memory.empty_pair
    deploy_mode = unscanned if exact else config.deploy_mode
    programs, rows = plan.programs, plan.rows
    split = programs * rows > 1
    r, middle, inner = ints[0], len(ints) == 2, ints[-1]  # the middle kernel takes (r, inner), the row one r
    int64 = torch.int64
    values_too = name not in ("argmax", "argmin")
    pair = name in ("max", "min")  # values and indices, allocated together
    indexed = name in INDEXED

    def run(operands: tuple) -> Any:
        x, correction = operands
        launcher = plan.launcher if plan.backend == requested_backend() else plan.kept()
        if not deploy_mode() and not (scan(x.data_ptr(), numel, mask) if small else all_finite(x)):
            return None
        if pair:
            values, indices = empty_pair(shape, shape, dtype, index, int64)
        else:
            values = empty_(shape, dtype, index) if values_too else x
            indices = empty_(shape, int64, index) if indexed or scratch else values
        if launcher is None or (split and device_tp(index) > 1):
            plan.launch_checked((x, values, indices, *ints, correction))
        elif middle:
            launcher(programs, rows, 1, x, values, indices, r, inner, correction)
        else:
            launcher(programs, rows, 1, x, values, indices, r, correction)
        if indexed:
            return (values, indices) if values_too else indices
        return values

    return run

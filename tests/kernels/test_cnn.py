"""Batch norm, max pooling (+ backwards), gather and scatter_add kernels against CPU torch, on device."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

import torch_rbln  # noqa: F401
from torch_rbln import registry

F32 = {"atol": 1e-5, "rtol": 1e-5}


def _on_device(*ops: str) -> None:
    report = registry.fallback_report()
    for op in ops:
        assert report[op]["cpu"] == 0 and report[op]["device"] >= 1, registry.format_report(report)


# ---------------------------------------------------------------- batch norm

def _bn_step(x, weight, bias, rm, rv, training, layout=None):
    x = x.detach().requires_grad_()
    params = [p.detach().requires_grad_() if p is not None else None for p in (weight, bias)]
    inp = layout(x) if layout else x
    y = F.batch_norm(inp, rm, rv, params[0], params[1], training=training, momentum=0.3, eps=1e-4)
    weights = torch.randn(y.shape, generator=torch.Generator().manual_seed(3)).to(y.device)
    (y * weights).sum().backward()
    return [y, x.grad] + [p.grad if p is not None else None for p in params]


# (8, 4) and (2000, 3): BatchNorm1d, its images walked as the positions of one image (2000: two blocks)
@pytest.mark.parametrize("shape", [(4, 3, 5, 7), (2, 5, 9), (8, 4), (2000, 3), (3, 2, 33, 40)], ids=str)
@pytest.mark.parametrize("training", [True, False])
@pytest.mark.parametrize("affine", [True, False])
def test_batch_norm_matches_cpu(shape, training, affine):
    gen = torch.Generator().manual_seed(sum(shape))
    C = shape[1]
    x = torch.randn(shape, generator=gen) * 2 + 0.5
    weight = torch.rand(C, generator=gen) + 0.5 if affine else None
    bias = torch.randn(C, generator=gen) if affine else None
    rm, rv = torch.randn(C, generator=gen), torch.rand(C, generator=gen) + 0.5
    d_rm, d_rv = rm.clone().to("rbln"), rv.clone().to("rbln")
    expected = _bn_step(x, weight, bias, rm, rv, training)  # updates rm, rv in place (training)
    registry.reset_fallback_report()
    got = _bn_step(x.to("rbln"), *(None if t is None else t.to("rbln") for t in (weight, bias)), d_rm, d_rv,
                   training)
    for g, e in zip(got, expected, strict=True):
        if e is None:
            assert g is None
        else:
            torch.testing.assert_close(g.cpu(), e, atol=1e-4, rtol=1e-4)
    # running stats updated in place as on the CPU (training), untouched in eval
    torch.testing.assert_close(d_rm.cpu(), rm, **F32)
    torch.testing.assert_close(d_rv.cpu(), rv, **F32)
    _on_device("aten::native_batch_norm", "aten::native_batch_norm_backward")


@pytest.mark.parametrize("train", [True, False])
@pytest.mark.parametrize("output_mask", [(True, True, True), (False, True, True), (True, False, False)],
                         ids=str)
def test_batch_norm_backward_output_masks_and_one_specialisation(train, output_mask):
    """native_batch_norm_backward for each gradient subset, training and eval statistics, with and without
    a weight, against the CPU; and the forward and backward kernels' flags are runtime values: every
    such call at one shape and dtype uses one specialisation of each kernel."""
    from torch_rbln.kernels import cnn
    from torch_rbln.registry import conv as cnn_registry

    gen = torch.Generator().manual_seed(5)
    x, grad = torch.randn(3, 4, 6, 5, generator=gen), torch.randn(3, 4, 6, 5, generator=gen)
    w, b = torch.rand(4, generator=gen) + 0.5, torch.randn(4, generator=gen)
    rm, rv = torch.randn(4, generator=gen), torch.rand(4, generator=gen) + 0.5
    aten = torch.ops.aten
    for weight in (w, None):
        mask = list(output_mask) if weight is not None else [True, False, False]  # no weight: input only
        _, mean, invstd = aten.native_batch_norm(x, weight, b, rm.clone(), rv.clone(), train, 0.1, 1e-5)
        expected = aten.native_batch_norm_backward(grad, x, weight, rm, rv, mean, invstd, train, 1e-5, mask)
        dev = [None if t is None else t.to("rbln") for t in (grad, x, weight, rm, rv, mean, invstd)]
        registry.reset_fallback_report()
        got = aten.native_batch_norm_backward(*dev, train, 1e-5, mask)
        for g, e, wanted in zip(got, expected, mask, strict=True):
            if not wanted or e is None:
                assert g is None or not wanted
                continue
            torch.testing.assert_close(g.cpu(), e, atol=1e-4, rtol=1e-4)
        _on_device("aten::native_batch_norm_backward")
        aten.native_batch_norm(dev[1], dev[2], b.to("rbln"), dev[3].clone(), dev[4].clone(), train, 0.1, 1e-5)
    block = cnn_registry._plane_block(6 * 5, cnn.BLOCK)
    for kernel in (cnn.batch_norm_kernel, cnn.batch_norm_backward_kernel):
        specs = [c.spec.params for c in kernel.cache.values()
                 if c.spec.params[0][2] == "fp32" and ("BLOCK", "constexpr", block) in c.spec.params]
        assert len(specs) == 1, specs


def _spaced(t: torch.Tensor) -> torch.Tensor:
    """`t` on rbln as every other element of a buffer twice its length."""
    view = torch.zeros(2 * t.numel(), dtype=t.dtype, device="rbln")[::2]
    view.copy_(t.to("rbln"))
    return view


@pytest.mark.parametrize("train", [True, False])
def test_batch_norm_with_strided_parameters_matches_cpu(train):
    """Weight, bias and statistics that are strided views (the kernels read them densely: a strided
    weight once gave wrong results silently). Running statistics updated in training must be
    contiguous to stay on the device; strided ones take the CPU fallback, updated in place."""
    gen = torch.Generator().manual_seed(9)
    x, grad = torch.randn(3, 4, 6, generator=gen), torch.randn(3, 4, 6, generator=gen)
    w, b = torch.rand(4, generator=gen) + 0.5, torch.randn(4, generator=gen)
    rm, rv = torch.randn(4, generator=gen), torch.rand(4, generator=gen) + 0.5
    aten = torch.ops.aten
    cpu_rm, cpu_rv = rm.clone(), rv.clone()
    expected = aten.native_batch_norm(x, w, b, cpu_rm, cpu_rv, train, 0.1, 1e-5)
    dev_rm, dev_rv = _spaced(rm), _spaced(rv)
    got = aten.native_batch_norm(x.to("rbln"), _spaced(w), _spaced(b), dev_rm, dev_rv, train, 0.1, 1e-5)
    for g, e in zip(got, expected, strict=True):
        torch.testing.assert_close(g.cpu(), e, **F32)
    torch.testing.assert_close(dev_rm.cpu(), cpu_rm, **F32)
    torch.testing.assert_close(dev_rv.cpu(), cpu_rv, **F32)
    _, mean, invstd = expected
    want = aten.native_batch_norm_backward(grad, x, w, rm, rv, mean, invstd, train, 1e-5, [True, True, True])
    registry.reset_fallback_report()
    strided = [_spaced(t) for t in (w, rm, rv, mean, invstd)]
    have = aten.native_batch_norm_backward(grad.to("rbln"), x.to("rbln"), *strided, train, 1e-5,
                                           [True, True, True])
    for g, e in zip(have, want, strict=True):
        torch.testing.assert_close(g.cpu(), e, atol=1e-4, rtol=1e-4)
    _on_device("aten::native_batch_norm_backward")


def test_batch_norm_channels_last_keeps_layout():
    gen = torch.Generator().manual_seed(1)
    x = torch.randn(2, 6, 5, 4, generator=gen)
    w, b = torch.rand(6, generator=gen), torch.randn(6, generator=gen)

    def make(t):
        return t.contiguous(memory_format=torch.channels_last)
    expected = _bn_step(x, w, b, None, None, True, layout=make)
    registry.reset_fallback_report()
    got = _bn_step(x.to("rbln"), w.to("rbln"), b.to("rbln"), None, None, True, layout=make)
    for g, e in zip(got, expected, strict=True):
        torch.testing.assert_close(g.cpu(), e, atol=1e-4, rtol=1e-4)
    assert got[0].stride() == expected[0].stride()
    _on_device("aten::native_batch_norm", "aten::native_batch_norm_backward")


def test_batch_norm_half_input_float32_params():
    """Mixed precision (autocast's form): half activations, float32 parameters and statistics."""
    gen = torch.Generator().manual_seed(2)
    x = torch.randn(4, 3, 6, 5, generator=gen).half()
    w, b = torch.rand(3, generator=gen) + 0.5, torch.randn(3, generator=gen)
    rm, rv = torch.zeros(3), torch.ones(3)
    d_rm, d_rv = rm.clone().to("rbln"), rv.clone().to("rbln")
    registry.reset_fallback_report()
    got = torch.native_batch_norm(x.to("rbln"), w.to("rbln"), b.to("rbln"), d_rm, d_rv, True, 0.1, 1e-5)
    expected = torch.native_batch_norm(x, w, b, rm, rv, True, 0.1, 1e-5)
    for g, e in zip(got, expected, strict=True):
        assert g.dtype == e.dtype
        torch.testing.assert_close(g.cpu(), e, atol=2e-3, rtol=2e-3)
    torch.testing.assert_close(d_rv.cpu(), rv, atol=1e-4, rtol=1e-4)
    _on_device("aten::native_batch_norm")


def test_native_batch_norm_legit_overloads():
    """The overloads torch.compile's decompositions produce, against CPU, eval outputs included."""
    gen = torch.Generator().manual_seed(4)
    x = torch.randn(3, 4, 5, generator=gen)
    w, b = torch.rand(4, generator=gen), torch.randn(4, generator=gen)
    rm, rv = torch.randn(4, generator=gen), torch.rand(4, generator=gen) + 0.5
    dev = [t.to("rbln") for t in (x, w, b, rm, rv)]
    aten = torch.ops.aten
    registry.reset_fallback_report()
    pairs = [
        (aten._native_batch_norm_legit.default(*dev, True, 0.1, 1e-5),
         aten._native_batch_norm_legit.default(x, w, b, rm, rv, True, 0.1, 1e-5)),
        (aten._native_batch_norm_legit.no_stats(*dev[:3], True, 0.1, 1e-5),
         aten._native_batch_norm_legit.no_stats(x, w, b, True, 0.1, 1e-5)),
        (aten._native_batch_norm_legit_no_training.default(*dev, 0.1, 1e-5),
         aten._native_batch_norm_legit_no_training.default(x, w, b, rm, rv, 0.1, 1e-5)),
    ]
    for got, expected in pairs:
        for g, e in zip(got, expected, strict=True):
            assert g.shape == e.shape and g.dtype == e.dtype
            torch.testing.assert_close(g.cpu(), e, atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(dev[3].cpu(), rm, **F32)
    _on_device("aten::_native_batch_norm_legit", "aten::_native_batch_norm_legit_no_training")


# ---------------------------------------------------------------- max pooling

POOLS = [  # (input shape, kernel, stride, padding, dilation, ceil_mode)
    ((2, 3, 8, 8), 2, None, 0, 1, False),
    ((2, 3, 9, 7), 3, 2, 1, 1, False),
    ((1, 2, 10, 11), (3, 2), (2, 1), (1, 0), (2, 1), True),
    ((3, 7, 5), 2, 2, 0, 1, True),  # 3-d input, ceil_mode keeps the partial window
    ((2, 2, 6, 6), 3, 1, 1, 1, False),  # overlapping windows: the backward sums
    ((1, 2, 11, 13), 2, 3, 0, 1, False),  # gaps between windows: elements no window holds stay 0
    # planes of several output tiles (at most 64 columns each): windows that overlap across a tile edge
    # (stride 1), and windows that do not (stride 2, each window's box written whole)
    ((1, 2, 20, 150), 3, 1, 0, 1, False),
    ((1, 2, 20, 150), 2, 2, 0, 1, True),
]


def _pool_step(x, args, layout=None):
    x = x.detach().requires_grad_()
    y, idx = F.max_pool2d(layout(x) if layout else x, *args, return_indices=True)
    weights = torch.randn(y.shape, generator=torch.Generator().manual_seed(3)).to(y.device)
    (y * weights).sum().backward()
    return y, idx, x.grad


@pytest.mark.parametrize("case", POOLS, ids=str)
def test_max_pool2d_matches_cpu(case):
    shape, *args = case
    # ties inside windows: integers, so the first maximum in window order must win as on the CPU
    x = torch.randint(-4, 5, shape, generator=torch.Generator().manual_seed(len(shape))).float()
    expected = _pool_step(x, args)
    registry.reset_fallback_report()
    got = _pool_step(x.to("rbln"), args)
    for g, e in zip(got, expected, strict=True):
        torch.testing.assert_close(g.cpu(), e, **F32)
    _on_device("aten::max_pool2d_with_indices", "aten::max_pool2d_with_indices_backward")


def test_max_pool2d_channels_last_and_half():
    x = torch.randn(2, 5, 9, 8, generator=torch.Generator().manual_seed(9))

    def make(t):
        return t.contiguous(memory_format=torch.channels_last)
    expected = _pool_step(x, (3, 2, 1), layout=make)
    registry.reset_fallback_report()
    got = _pool_step(x.to("rbln"), (3, 2, 1), layout=make)
    for g, e in zip(got, expected, strict=True):
        torch.testing.assert_close(g.cpu(), e, **F32)
    assert got[0].stride() == expected[0].stride()
    half = x.half()
    y, idx = F.max_pool2d(half.to("rbln"), 2, return_indices=True)
    ey, eidx = F.max_pool2d(half, 2, return_indices=True)
    assert y.dtype == torch.float16
    torch.testing.assert_close(y.cpu(), ey, atol=0, rtol=0)
    torch.testing.assert_close(idx.cpu(), eidx)
    _on_device("aten::max_pool2d_with_indices", "aten::max_pool2d_with_indices_backward")


@pytest.mark.parametrize("dtype, args", [
    (torch.float16, (2, 2)), (torch.bfloat16, (3, 1, 1)),
    # the other pairings: each dtype is three compiles of its own (~6 s of a cold suite each)
    pytest.param(torch.bfloat16, (2, 2), marks=pytest.mark.slow),
    pytest.param(torch.float16, (3, 1, 1), marks=pytest.mark.slow),
], ids=["disjoint-float16", "overlapping-bfloat16", "disjoint-bfloat16", "overlapping-float16"])
def test_max_pool2d_backward_in_half_precision(dtype, args):
    """The backward adds in float32 and rounds once: disjoint windows give torch's bits (one gradient
    per element), overlapping ones its sums (which torch adds in the input's dtype) within its
    rounding per term."""
    x = torch.randn(2, 3, 12, 10, generator=torch.Generator().manual_seed(7)).to(dtype)
    expected = _pool_step(x, args)
    registry.reset_fallback_report()
    got = _pool_step(x.to("rbln"), args)
    exact = args == (2, 2)
    for g, e in zip(got, expected, strict=True):
        assert g.dtype == e.dtype
        tolerance = {"atol": 0, "rtol": 0} if exact else {"atol": 2e-2, "rtol": 2e-2}
        torch.testing.assert_close(g.cpu(), e, **tolerance)
    _on_device("aten::max_pool2d_with_indices", "aten::max_pool2d_with_indices_backward")


def test_max_pool2d_bad_input_raises_torchs_error():
    x = torch.randn(1, 1, 4, 4)
    with pytest.raises(RuntimeError) as cpu_error:
        F.max_pool2d(x, 2, padding=2)  # padding over half the kernel
    registry.reset_fallback_report()
    with pytest.raises(RuntimeError) as device_error:
        F.max_pool2d(x.to("rbln"), 2, padding=2)
    assert str(device_error.value) == str(cpu_error.value)
    assert registry.fallback_report()["aten::max_pool2d_with_indices"]["reasons"] == {
        "invalid pooling parameters": 1}


# ---------------------------------------------------------------- gather / scatter_add

@pytest.mark.parametrize("dim", [0, 1, 2, -1])
def test_gather_and_its_backward_match_cpu(dim):
    gen = torch.Generator().manual_seed(dim + 10)
    x = torch.randn(4, 5, 6, generator=gen)
    shape = [3, 4, 5]  # smaller than x outside dim too
    size = x.shape[dim]
    shape[dim] = 7
    index = torch.randint(0, size, shape, generator=gen)
    x_cpu = x.clone().requires_grad_()
    expected = torch.gather(x_cpu, dim, index)
    weights = torch.randn(expected.shape, generator=gen)
    (expected * weights).sum().backward()
    x_dev = x.to("rbln").requires_grad_()
    registry.reset_fallback_report()
    got = torch.gather(x_dev, dim, index.to("rbln"))
    (got * weights.to("rbln")).sum().backward()
    torch.testing.assert_close(got.cpu(), expected.detach(), atol=0, rtol=0)
    torch.testing.assert_close(x_dev.grad.cpu(), x_cpu.grad, **F32)
    _on_device("aten::gather")


@pytest.mark.parametrize("dim", [0, 2, 3])
def test_gather_of_several_tiles_matches_cpu(dim):
    """4-d, 16,800 positions: several tiles of dims 2 and 3 per (dim 0, dim 1) index, partial at both
    edges, the gathered dim among the tiled ones or not."""
    gen = torch.Generator().manual_seed(dim)
    x = torch.randn(3, 4, 45, 75, generator=gen)
    shape = [2, 4, 40, 70]
    index = torch.randint(0, x.shape[dim], shape, generator=gen)
    registry.reset_fallback_report()
    got = torch.gather(x.to("rbln"), dim, index.to("rbln"))
    torch.testing.assert_close(got.cpu(), torch.gather(x, dim, index), atol=0, rtol=0)
    _on_device("aten::gather")


def test_gather_non_contiguous_and_integer():
    gen = torch.Generator().manual_seed(3)
    x = torch.randint(0, 100, (6, 5), generator=gen)  # int64 data, as BERT's token type buffer
    index = torch.randint(0, 5, (4, 6), generator=gen).t()  # (6, 4), transposed
    registry.reset_fallback_report()
    got = torch.gather(x.to("rbln"), 1, index.to("rbln"))
    torch.testing.assert_close(got.cpu(), torch.gather(x, 1, index))
    xt = torch.randn(5, 6, generator=gen).t()  # non-contiguous source
    got = torch.gather(xt.to("rbln"), 0, index.to("rbln") % 5)
    torch.testing.assert_close(got.cpu(), torch.gather(xt, 0, index % 5))
    _on_device("aten::gather")


def test_scatter_add_matches_cpu():
    gen = torch.Generator().manual_seed(8)
    x = torch.randn(3, 5, 4, generator=gen)
    index = torch.randint(0, 5, (3, 7, 4), generator=gen)
    src = torch.randn(3, 7, 4, generator=gen)
    registry.reset_fallback_report()
    got = torch.scatter_add(x.to("rbln"), 1, index.to("rbln"), src.to("rbln"))
    torch.testing.assert_close(got.cpu(), torch.scatter_add(x, 1, index, src), **F32)
    inplace = x.to("rbln")
    inplace.scatter_add_(1, index.to("rbln"), src.to("rbln"))
    torch.testing.assert_close(inplace.cpu(), torch.scatter_add(x, 1, index, src), **F32)
    _on_device("aten::scatter_add", "aten::scatter_add_")


def test_scatter_keeps_the_last_write_and_sums_half_in_index_order():
    """Repeated index entries: scatter keeps the last one written, scatter_add adds in index order and
    rounds to float16 at each add as torch's CPU kernel does (exactly equal here)."""
    index = torch.tensor([[2, 0, 2, 2, 1, 0]])
    src = torch.tensor([[1.0, 2.0, 3.0, 4.0, 5.0, 6.0]])
    x = torch.zeros(1, 3)
    registry.reset_fallback_report()
    got = torch.scatter(x.to("rbln"), 1, index.to("rbln"), src.to("rbln"))
    assert torch.equal(got.cpu(), torch.scatter(x, 1, index, src))  # [6, 5, 4]
    half = torch.full((1, 3), 2048.0).half()  # 2048 + 1 rounds back to 2048 in float16
    ones = torch.ones(1, 6).half()
    got = torch.scatter_add(half.to("rbln"), 1, index.to("rbln"), ones.to("rbln"))
    assert torch.equal(got.cpu(), torch.scatter_add(half, 1, index, ones))
    _on_device("aten::scatter", "aten::scatter_add")


def test_a_scatter_along_the_last_dim_of_a_large_tensor_stays_on_the_device():
    """One output element per (row, column) is more programs than a grid's second dim allows (65535):
    the kernel's grid is one program per slice and column block, whatever the scattered dim's size."""
    gen = torch.Generator().manual_seed(5)
    index = torch.randint(0, 128, (1024, 1), generator=gen)
    x = torch.zeros(1024, 128)
    registry.reset_fallback_report()
    assert torch.equal(x.to("rbln").scatter(1, index.to("rbln"), 1.0).cpu(), x.scatter(1, index, 1.0))
    _on_device("aten::scatter")


def test_gather_out_of_range_raises_torchs_error():
    x, index = torch.randn(3, 4), torch.tensor([[0, 4]])
    with pytest.raises(RuntimeError) as cpu_error:
        torch.gather(x, 1, index)
    registry.reset_fallback_report()
    with pytest.raises(RuntimeError) as device_error:
        torch.gather(x.to("rbln"), 1, index.to("rbln"))
    assert str(device_error.value) == str(cpu_error.value)
    assert registry.fallback_report()["aten::gather"]["reasons"] == {"index out of range": 1}


# ---------------------------------------------------------------- average pooling

def _avg_pool_step(pool, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """(pool(x), the gradient of x under a fixed random weighting of the output)."""
    x = x.detach().requires_grad_()
    y = pool(x)
    weights = torch.randn(y.shape, generator=torch.Generator().manual_seed(3)).to(y.device)
    (y * weights).sum().backward()
    return y, x.grad


AVG_POOLS = [  # (input shape, kernel, stride, padding, ceil_mode, count_include_pad, divisor_override)
    ((2, 3, 8, 8), 2, None, 0, False, True, None),
    ((2, 3, 9, 7), 3, 2, 1, False, True, None),
    ((2, 3, 9, 7), 3, 2, 1, True, False, None),  # padding not counted, partial last window
    ((1, 2, 10, 11), (3, 2), (2, 1), (1, 0), True, True, None),
    ((3, 7, 5), 3, 1, 1, False, True, 4),  # 3-d input, divisor_override
    ((1, 2, 20, 150), 3, 1, 1, False, False, None),  # several output tiles, windows overlapping across
]


@pytest.mark.parametrize("case", AVG_POOLS, ids=str)
def test_avg_pool2d_matches_cpu(case):
    shape, kernel, stride, padding, ceil_mode, count_pad, divisor = case
    x = torch.randn(shape, generator=torch.Generator().manual_seed(sum(shape)))
    pool = lambda t: F.avg_pool2d(t, kernel, stride, padding, ceil_mode, count_pad, divisor)  # noqa: E731
    expected = _avg_pool_step(pool, x)
    registry.reset_fallback_report()
    got = _avg_pool_step(pool, x.to("rbln"))
    for g, e in zip(got, expected, strict=True):
        torch.testing.assert_close(g.cpu(), e, **F32)
    _on_device("aten::avg_pool2d", "aten::avg_pool2d_backward")


ADAPTIVE_POOLS = [  # (input shape, output size)
    ((2, 3, 8, 8), 4),  # equal windows
    ((2, 3, 7, 7), 3),  # overlapping windows of sizes 3, 3, 3 with shared edges
    ((2, 3, 5, 13), (7, 4)),  # more outputs than input rows: windows of one row, repeated
    ((3, 6, 5), (4, 2)),  # 3-d input
    ((1, 4, 14, 14), 1),  # to 1x1 (the module's common case; torch itself takes `mean` for it)
    ((1, 2, 40, 100), (2, 1)),  # windows of 20 x 100: wider than one 64-column box of the backward
]


@pytest.mark.parametrize("case", ADAPTIVE_POOLS, ids=str)
def test_adaptive_avg_pool2d_matches_cpu_exactly(case):
    """torch's windows [floor(i*H/OH), ceil((i+1)*H/OH)) summed and divided in torch's order: float32
    results equal the CPU's bit for bit, forward and backward."""
    shape, size = case
    x = torch.randn(shape, generator=torch.Generator().manual_seed(sum(shape)))
    expected = _avg_pool_step(lambda t: F.adaptive_avg_pool2d(t, size), x)
    registry.reset_fallback_report()
    got = _avg_pool_step(lambda t: F.adaptive_avg_pool2d(t, size), x.to("rbln"))
    exact = {"atol": 0, "rtol": 0} if size != 1 else F32  # 1x1 is torch's `mean`: its own sum order
    for g, e in zip(got, expected, strict=True):
        torch.testing.assert_close(g.cpu(), e, **exact)
    if size != 1:
        _on_device("aten::_adaptive_avg_pool2d", "aten::_adaptive_avg_pool2d_backward")


def test_adaptive_avg_pool2d_channels_last_and_half():
    x = torch.randn(2, 4, 9, 6, generator=torch.Generator().manual_seed(1))
    last = x.contiguous(memory_format=torch.channels_last)
    got = F.adaptive_avg_pool2d(last.to("rbln"), (4, 5))
    expected = F.adaptive_avg_pool2d(last, (4, 5))
    torch.testing.assert_close(got.cpu(), expected, atol=0, rtol=0)
    assert got.stride() == expected.stride()
    half = F.adaptive_avg_pool2d(x.half().to("rbln"), (2, 5))
    assert half.dtype == torch.float16
    torch.testing.assert_close(half.cpu(), F.adaptive_avg_pool2d(x.half(), (2, 5)), atol=1e-3, rtol=1e-3)

"""Scaled dot-product attention on rbln: the flash kernels against PyTorch's CPU SDPA.

Every case checks the forward and the gradients against CPU and that the device kernels ran (counted
in `registry.device_counts()`); declined calls must name their reason in `fallback_report()`.
Shapes are small and mostly use head dim <= 16 and sequences < 64, so the whole file compiles few
kernel specialisations (one tile config each); larger head dims and tiles are `slow`.
"""

from __future__ import annotations

import logging
import math

import pytest
import torch
import torch.nn.functional as F
from torch_rbln.registry import attention as A

import torch_rbln  # noqa: F401
from torch_rbln import registry

FORWARD = A.FORWARD
BACKWARD = A.BACKWARD
# float32: absolute/relative tolerance against CPU. float16/bfloat16: both rbln and CPU are compared with
# a float64 reference computed from the same (rounded) inputs, and rbln's largest error may be at most
# twice CPU's plus this floor (the two round differently; neither is "the" answer).
F32_TOL = 2e-5
HALF_FLOOR = {torch.float16: 2e-3, torch.bfloat16: 1.6e-2}
# float32 gradients of the OpInfo samples: there CPU's own float32 gradients are up to 1.4e-4 from the
# float64 ones (values up to ~50; sample 24), beyond F32_TOL, so a direct comparison with CPU measures
# CPU's rounding as much as ours. They are compared with a float64 reference instead, with F32_TOL plus
# CPU's largest error from it as the absolute tolerance (what |rbln - CPU| <= F32_TOL gives by the
# triangle inequality, without charging CPU's error to rbln).


def assert_like_cpu(actual: torch.Tensor, cpu: torch.Tensor, reference: torch.Tensor | None,
                    what: str) -> None:
    """float32 against CPU with F32_TOL; half precision (or float32 given a float64 `reference`) by the
    error from the float64 reference, against CPU's (half: at most twice CPU's plus HALF_FLOOR;
    float32: F32_TOL plus CPU's largest error)."""
    actual = actual.detach().cpu()
    if reference is None:
        torch.testing.assert_close(actual, cpu.detach(), atol=F32_TOL, rtol=F32_TOL, equal_nan=True,
                                   msg=lambda m: f"{what}: {m}")
        return
    assert actual.dtype == cpu.dtype
    theirs = (cpu.detach().double() - reference).abs().max().item()
    if actual.dtype == torch.float32:
        torch.testing.assert_close(actual.double(), reference, atol=F32_TOL + theirs, rtol=F32_TOL,
                                   equal_nan=True, msg=lambda m: f"{what} (CPU's error {theirs:.3g}): {m}")
        return
    ours = (actual.double() - reference).abs().max().item()
    bound = 2 * theirs + HALF_FLOOR[actual.dtype]
    assert ours <= bound, f"{what}: rbln error {ours:.3g} vs float64, CPU {theirs:.3g} (bound {bound:.3g})"


@pytest.fixture
def fallback_logs():
    """INFO records of the torch_rbln loggers (they do not propagate to the root logger)."""
    records: list[logging.LogRecord] = []

    class Collect(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            records.append(record)

    logger = logging.getLogger("torch_rbln")
    handler, previous = Collect(level=logging.INFO), logger.level
    logger.setLevel(logging.INFO)
    logger.addHandler(handler)
    yield records
    logger.removeHandler(handler)
    logger.setLevel(previous)


def _device(t: torch.Tensor | None, grad: bool) -> torch.Tensor | None:
    if t is None:
        return None
    return t.detach().to("rbln").requires_grad_(grad and t.is_floating_point())


def _leaf(t: torch.Tensor | None, grad: bool) -> torch.Tensor | None:
    if t is None:
        return None
    return t.detach().clone().requires_grad_(grad and t.is_floating_point())


def run_both(args: list, mask: torch.Tensor | None, grad: bool, seed: int = 0, float64: bool = False,
             **kwargs) -> tuple:
    """SDPA on CPU, on rbln (and in float64 for half inputs, or with `float64`), forward and (with
    `grad`) backward with the same output gradient. Returns (outputs, grads) as [cpu, rbln, float64 or
    None] lists; the fallback report afterwards covers the rbln call only."""
    half = args[0].dtype in HALF_FLOOR or float64
    mask64 = mask if mask is None or mask.dtype == torch.bool else mask.double()
    runs = [([_leaf(t, grad) for t in args], mask), ([_device(t, grad) for t in args], _device(mask, False))]
    if half:
        runs.append(([_leaf(t.double(), grad) for t in args], mask64))
    outputs: list = [None, None, None]
    grads: list = [None, None, None]
    grad_out = None
    for i, (tensors, run_mask) in enumerate(runs):
        if i == 1:
            registry.reset_fallback_report()
        torch.manual_seed(seed)  # the same dropout draw for declined dropout calls
        out = F.scaled_dot_product_attention(*tensors, attn_mask=run_mask, **kwargs)
        outputs[i] = out
        if grad:
            if grad_out is None:
                grad_out = torch.randn(out.shape, generator=torch.Generator().manual_seed(seed)).to(out.dtype)
            torch.manual_seed(seed)
            out.backward(grad_out.to(out.device, out.dtype))
            grads[i] = [t.grad for t in tensors]
    return outputs, grads  # the float64 run touches no rbln tensor: the report is the rbln call's


def check_sdpa(q, k, v, mask=None, *, grad=True, expect_device=True, **kwargs) -> dict:
    """Compare rbln with CPU (forward, and gradients when `grad`); return the rbln call's report."""
    outputs, grads = run_both([q, k, v], mask, grad, **kwargs)
    report = registry.fallback_report()
    assert outputs[1].device.type == "rbln"
    assert_like_cpu(outputs[1], outputs[0], outputs[2], "output")
    if grad:
        for i, name in enumerate("qkv"):
            assert_like_cpu(grads[1][i], grads[0][i], grads[2][i] if grads[2] else None, f"grad of {name}")
    if expect_device:
        counts = registry.device_counts()
        assert counts.get(FORWARD) == 1, registry.format_report(report)
        assert counts.get(BACKWARD) == (1 if grad else None), registry.format_report(report)
        assert A.SDPA not in report, registry.format_report(report)
    return report


def _qkv(b, h, m, n, d, *, hk=None, dtype=torch.float32, seed=0):
    generator = torch.Generator().manual_seed(seed)
    hk = h if hk is None else hk
    make = lambda *shape: torch.randn(*shape, generator=generator).to(dtype)  # noqa: E731
    return make(b, h, m, d), make(b, hk, n, d), make(b, hk, n, d)


CASES = {
    # name: (q/k/v shape args, sdpa kwargs builder)
    "causal_odd_length": ((1, 2, 37, 37, 16), lambda: {"is_causal": True}),
    "causal_q_longer": ((1, 2, 45, 20, 16), lambda: {"is_causal": True}),
    "causal_kv_longer": ((2, 2, 20, 45, 16), lambda: {"is_causal": True}),
    "plain_custom_scale": ((2, 3, 33, 50, 8), lambda: {"scale": 0.37}),
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_forward_backward_match_cpu(name):
    shape, kwargs = CASES[name]
    check_sdpa(*_qkv(*shape), **kwargs())


@pytest.mark.parametrize("backward", [False, pytest.param(True, marks=pytest.mark.slow)])
def test_boolean_mask_with_fully_masked_row(backward):
    q, k, v = _qkv(2, 2, 37, 45, 16)
    mask = torch.rand(37, 45, generator=torch.Generator().manual_seed(1)) > 0.4
    mask[5] = False  # a query that sees no key: output 0, no NaN (PyTorch's safe softmax)
    check_sdpa(q, k, v, mask, grad=backward)


def test_additive_mask_broadcast_over_batch_and_heads_with_scale():
    q, k, v = _qkv(2, 3, 29, 41, 16)
    bias = torch.randn(2, 1, 1, 41)
    bias[1, ..., 7] = -math.inf
    check_sdpa(q, k, v, bias, scale=0.2)
    per_head = torch.randn(1, 3, 29, 41)  # broadcast over the batch only
    check_sdpa(q, k, v, per_head)


def test_grouped_query_attention_and_3d_inputs():
    q, k, v = _qkv(1, 4, 30, 30, 16, hk=2)
    check_sdpa(q, k, v, is_causal=True, enable_gqa=True)
    q, k, v = _qkv(1, 1, 21, 26, 16)
    check_sdpa(q[0], k[0], v[0], torch.randn(21, 26))


def test_strided_inputs_need_no_copy_and_output_follows_query_layout():
    # the (B, L, H, D) -> transpose(1, 2) views models hand to SDPA
    q, k, v = (t.transpose(1, 2).contiguous().transpose(1, 2) for t in _qkv(1, 2, 19, 19, 16))
    report = check_sdpa(q, k, v, is_causal=True)
    assert "aten::clone" not in report and "aten::_to_copy" not in report
    out = F.scaled_dot_product_attention(*(t.to("rbln") for t in (q, k, v)))
    assert out.stride() == q.stride()


@pytest.mark.parametrize("dtype, backward", [
    (torch.float32, True), pytest.param(torch.float16, False, marks=pytest.mark.slow),
    (torch.bfloat16, False),
    pytest.param(torch.float16, True, marks=pytest.mark.slow),
    pytest.param(torch.bfloat16, True, marks=pytest.mark.slow),
], ids=["float32", "float16-forward", "bfloat16-forward", "float16", "bfloat16"])
def test_opinfo_samples_match_cpu(dtype, backward):
    """The OpInfo samples of nn.functional.scaled_dot_product_attention, forward and backward (half
    precision backward is `slow`: two more kernel compilations per dtype). Samples the kernels decline
    (3-D queries with 4-D keys) run on the CPU and must carry a reason; dropout samples run the math
    decomposition on the device. float32 outputs are compared with CPU's directly, float32
    gradients through the float64 reference (see F32_TOL)."""
    op_db = pytest.importorskip("torch.testing._internal.common_methods_invocations").op_db
    info = next(i for i in op_db if i.name == "nn.functional.scaled_dot_product_attention")
    on_device = declined = decomposed = 0
    for number, sample in enumerate(info.sample_inputs("cpu", dtype, requires_grad=backward)):
        kwargs = dict(sample.kwargs)
        mask = kwargs.pop("attn_mask", None)
        outputs, grads = run_both([sample.input, *sample.args], mask, backward, float64=backward, **kwargs)
        counts = registry.device_counts()
        if counts.get(FORWARD):
            assert counts.get(BACKWARD) == (1 if backward else None)
            on_device += 1
            assert_like_cpu(outputs[1], outputs[0], outputs[2] if dtype != torch.float32 else None,
                            f"sample {number}")
            for i in range(3 if backward else 0):
                assert_like_cpu(grads[1][i], grads[0][i], grads[2][i] if grads[2] else None,
                                f"sample {number}, grad {i}")
        elif counts.get(A.SDPA):
            # dropout: the math decomposition on device kernels, whose draw is not the CPU's (the
            # values are checked in test_dropout_runs_the_math_decomposition_on_device)
            assert kwargs.get("dropout_p", 0.0) > 0.0, f"sample {number} decomposed without dropout"
            decomposed += 1
            assert outputs[1].shape == outputs[0].shape and outputs[1].dtype == outputs[0].dtype
            assert torch.isfinite(outputs[1].detach().cpu().float()).all()
        else:
            assert registry.fallback_report()[A.SDPA]["reasons"], "a declined call must carry its reason"
            declined += 1
            torch.testing.assert_close(outputs[1].detach().cpu(), outputs[0].detach())
            for i in range(3 if backward else 0):
                torch.testing.assert_close(grads[1][i].cpu(), grads[0][i])
    assert on_device >= 8 and declined + decomposed >= 1, (on_device, declined, decomposed)


def test_dropout_runs_the_math_decomposition_on_device(fallback_logs):
    """dropout_p > 0: PyTorch's math decomposition on the device (op-library matmul, softmax and
    dropout). With v the identity, each output entry is P * m / (1 - p) for the CPU's probabilities P and
    a 0/1 keep mask m, so the mask can be read back and the whole call, gradients included, checked
    against the CPU computing the same function with that mask."""
    p, scale = 0.5, 0.25
    q, k, _ = _qkv(1, 2, 12, 16, 16)
    v = torch.eye(16).expand(1, 2, 16, 16).contiguous()
    q_dev, k_dev, v_dev = _device(q, True), _device(k, True), _device(v, True)
    registry.reset_fallback_report()  # the INFO line comes once per reason until a reset
    torch.manual_seed(3)
    actual = F.scaled_dot_product_attention(q_dev, k_dev, v_dev, dropout_p=p, scale=scale)
    torch.manual_seed(3)
    again = F.scaled_dot_product_attention(q_dev.detach(), k_dev.detach(), v_dev.detach(), dropout_p=p,
                                           scale=scale)
    assert torch.equal(actual.detach().cpu(), again.cpu())  # the device generator is seeded by torch's
    probabilities = torch.softmax(q @ k.transpose(-1, -2) * scale, dim=-1)
    keep = actual.detach().cpu() * (1 - p) / probabilities
    mask = keep.round()
    torch.testing.assert_close(keep, mask, atol=1e-4, rtol=0)  # every entry dropped or kept, scaled
    assert 0.35 < mask.mean().item() < 0.65 and set(mask.unique().tolist()) == {0.0, 1.0}
    weights = torch.randn(actual.shape, generator=torch.Generator().manual_seed(5))
    (actual * weights.to("rbln")).sum().backward()
    q_cpu, k_cpu, v_cpu = _leaf(q, True), _leaf(k, True), _leaf(v, True)
    scores = torch.softmax(q_cpu @ k_cpu.transpose(-1, -2) * scale, dim=-1) * mask / (1 - p)
    ((scores @ v_cpu) * weights).sum().backward()
    for got, want in ((q_dev, q_cpu), (k_dev, k_cpu), (v_dev, v_cpu)):
        torch.testing.assert_close(got.grad.cpu(), want.grad, atol=1e-4, rtol=1e-4)
    assert A.SDPA not in {name for name, row in registry.fallback_report().items() if row["cpu"]}
    assert registry.device_counts()[A.SDPA] >= 2 and FORWARD not in registry.device_counts()
    assert registry.device_counts()["aten::native_dropout"] >= 2
    assert any("math decomposition" in r.getMessage() and "dropout" in r.getMessage() for r in fallback_logs)


def test_mask_that_requires_grad_runs_the_math_decomposition_on_device():
    """T5's position bias: the mask's gradient comes from differentiating the decomposition."""
    q, k, v = _qkv(1, 2, 10, 12, 16)
    bias = torch.randn(2, 10, 12, requires_grad=True)
    leaves = [_leaf(t, True) for t in (q, k, v)]
    devices = [_device(t, True) for t in (q, k, v)]
    dev_bias = bias.detach().to("rbln").requires_grad_()
    expected = F.scaled_dot_product_attention(*leaves, attn_mask=bias)
    registry.reset_fallback_report()
    actual = F.scaled_dot_product_attention(*devices, attn_mask=dev_bias)
    torch.testing.assert_close(actual.detach().cpu(), expected.detach(), atol=1e-5, rtol=1e-5)
    weights = torch.randn(expected.shape, generator=torch.Generator().manual_seed(2))
    (expected * weights).sum().backward()
    (actual * weights.to("rbln")).sum().backward()
    for got, want in ((dev_bias, bias), *zip(devices, leaves, strict=True)):
        torch.testing.assert_close(got.grad.cpu(), want.grad, atol=1e-5, rtol=1e-5)
    report = registry.fallback_report()
    assert A.SDPA not in report or report[A.SDPA]["cpu"] == 0, registry.format_report(report)
    assert registry.device_counts()[A.SDPA] == 1
    # a mask that needs a gradient on a call the decomposition must not take: NaN in q -> exact CPU path
    bad = q.clone()
    bad[0, 0, 0, 0] = math.nan
    registry.reset_fallback_report()
    F.scaled_dot_product_attention(bad.to("rbln"), k.to("rbln"), v.to("rbln"), attn_mask=dev_bias)
    assert registry.fallback_report()[A.SDPA]["reasons"] == {"nan_inf": 1}


def test_other_declines_run_pytorch_cpu_and_say_why():
    q, k, v = _qkv(1, 2, 10, 12, 16)
    bad = q.clone()
    bad[0, 0, 0, 0] = math.nan
    registry.reset_fallback_report()
    out = F.scaled_dot_product_attention(bad.to("rbln"), k.to("rbln"), v.to("rbln"))
    torch.testing.assert_close(out.cpu(), F.scaled_dot_product_attention(bad, k, v), equal_nan=True)
    assert registry.fallback_report()[A.SDPA]["reasons"] == {"nan_inf": 1}
    with pytest.raises(RuntimeError):  # invalid calls raise PyTorch's own error (from its CPU kernel)
        F.scaled_dot_product_attention(q.to("rbln"), k.to("rbln")[..., :8], v.to("rbln"))
    with pytest.raises(RuntimeError):  # ... with dropout too: not decomposed, the CPU raises
        F.scaled_dot_product_attention(q.to("rbln"), k.to("rbln")[..., :8], v.to("rbln"), dropout_p=0.5)


def test_fused_op_rejects_what_it_cannot_compute():
    q, k, v = (t.to("rbln") for t in _qkv(1, 2, 8, 8, 16))
    fused = torch.ops.aten._scaled_dot_product_fused_attention_overrideable
    with pytest.raises(NotImplementedError, match="no dropout"):
        fused(q, k, v, None, 0.5)
    with pytest.raises(ValueError, match="does not broadcast"):
        fused(q, k, v, torch.zeros(3, 8, device="rbln"))
    with pytest.raises(ValueError, match="not a multiple"):
        fused(q, k[:, :1].expand(1, 3, 8, 16), v)


def test_inference_mode_and_unsupported_reasons():
    q, k, v = _qkv(1, 2, 9, 9, 16)
    registry.reset_fallback_report()
    with torch.inference_mode():
        out = F.scaled_dot_product_attention(q.to("rbln"), k.to("rbln"), v.to("rbln"), is_causal=True)
    torch.testing.assert_close(out.cpu(), F.scaled_dot_product_attention(q, k, v, is_causal=True),
                               atol=2e-5, rtol=2e-5)
    assert registry.device_counts()[FORWARD] == 1
    d = [t.to("rbln") for t in (q, k, v)]
    assert A.unsupported(*d, None, 0.1, False, False).startswith("dropout_p > 0")
    assert A.unsupported(d[0], d[1][:, :1], d[2][:, :1], None, 0.0, False, False) == \
        "query and key/value head counts differ without enable_gqa"
    assert A.unsupported(*d, torch.ones(9, 9, dtype=torch.bool, device="rbln"), 0.0, True, False) == \
        "attn_mask together with is_causal"
    assert A.unsupported(*(t.double() for t in d), None, 0.0, False, False) == "dtype float64"


def test_each_launch_takes_the_largest_tile_its_sequences_fill():
    from torch_rbln.kernels.attention import _configs, _prune_tiles

    def tiles(m, n, d=16, block_d=16):
        return [(c.kwargs["BLOCK_M"], c.kwargs["BLOCK_N"])
                for c in _prune_tiles(_configs(), {"M": m, "N": n, "D": d, "BLOCK_D": block_d})]

    assert tiles(2, 16) == [(16, 16)]
    assert tiles(17, 9) == [(32, 32)]
    assert tiles(37, 45) == [(32, 32)]
    assert tiles(512, 512) == [(128, 64)]
    assert tiles(100, 1000) == [(64, 64)]
    assert tiles(64, 128) == [(64, 64)]
    # the 128x128 tile only where it holds every key: 65-128 keys and at least 128 queries
    assert tiles(128, 128) == [(128, 128)]
    assert tiles(1000, 100) == [(128, 128)]
    assert tiles(128, 65) == [(128, 128)]
    assert tiles(128, 129) == [(128, 64)]
    assert tiles(128, 64) == [(128, 64)]
    assert tiles(127, 128) == [(64, 64)]
    assert tiles(20, 300) == [(32, 32)]
    # product tiles: only with a product BLOCK_D (an inference forward) and for sequences and head dims
    # that fit them, the smallest alone
    assert tiles(2, 2, 2, 4) == [(4, 4)]
    assert tiles(1, 4, 8, 8) == [(4, 4)]
    assert tiles(5, 3, 8, 8) == [(8, 8)]
    assert tiles(5, 3, 9, 16) == [(16, 16)]
    assert tiles(2, 9, 4, 4) == [(16, 16)]
    assert tiles(2, 2, 2, 16) == [(16, 16)]  # a tl.dot BLOCK_D never takes a product tile
    assert tiles(512, 512, 64, 64) == [(128, 64)]


def test_block_d_is_small_only_for_product_tiles():
    from torch_rbln.kernels.attention import block_d

    assert [block_d(d, 9, 20) for d in (1, 2, 16, 17, 80)] == [16, 16, 16, 32, 128]  # tl.dot tiles
    assert [block_d(d, 2, 2) for d in (1, 2, 5, 8, 9)] == [4, 4, 8, 8, 16]
    assert block_d(2, 2, 9) == 16


def _kept_tile(tuner, shape_key: tuple) -> tuple[int, int, int]:
    from torch_rbln.registry import _launch

    _, keywords = _launch.tuned_config(tuner, shape_key)
    return keywords["BLOCK_M"], keywords["BLOCK_N"], keywords["BLOCK_D"]


def _forward_tile(q, k, v, mask=None, is_causal=False, scale=None) -> tuple[int, int, int]:
    """(BLOCK_M, BLOCK_N, BLOCK_D) the forward launch of these rbln operands kept (after such a
    launch)."""
    g = A.geometry(q, k, mask)
    strides = A.layout_strides(q.stride(), q.shape)
    _, _, shape_key, _, _, _ = A._forward_arguments(q, k, v, mask, strides, q.dtype, g,
                                                    A._default_scale(scale, g.head_dim), is_causal,
                                                    q.get_device())
    return _kept_tile(A.O._k("attention").attention_forward_kernel, shape_key)


def _backward_tiles(q, k, v, mask=None, is_causal=False, scale=None) -> list[tuple[int, int, int]]:
    """The tiles the two backward launches of these rbln operands kept (after such a backward)."""
    g = A.geometry(q, k, mask)
    index = q.get_device()
    lse = torch.empty(g.batch, g.heads, g.q_len, device=q.device)
    tiles = []
    calls = A._backward_calls(q, q, k, v, mask, q, lse, lse, (q, k, v), g, scale, is_causal)
    for tuner, _, tensors, scalars, constexprs in calls:
        shape_key, _, _ = A._backward_key(g, index, tensors, scalars, constexprs)
        tiles.append(_kept_tile(tuner, shape_key))
    return tiles


PRODUCT_CASES = {
    # name: ((b, h, m, n, d), hk, mask maker or None, sdpa kwargs, expected (BLOCK_M, BLOCK_N, BLOCK_D))
    "one_by_two": ((1, 1, 2, 2, 2), None, None, {}, (4, 4, 4)),
    "causal": ((2, 3, 5, 7, 8), None, None, {"is_causal": True}, (8, 8, 8)),
    "causal_q_longer_gqa": ((1, 4, 6, 3, 4), 2, None, {"is_causal": True, "enable_gqa": True}, (8, 8, 4)),
    "bool_mask_masked_row": ((2, 2, 4, 5, 8), None, "bool", {}, (8, 8, 8)),
    "additive_mask_scale": ((1, 2, 3, 4, 3), None, "float", {"scale": 0.7}, (4, 4, 4)),
}


def _product_mask(kind: str | None, m: int, n: int) -> torch.Tensor | None:
    generator = torch.Generator().manual_seed(3)
    if kind == "bool":
        mask = torch.rand(m, n, generator=generator) > 0.4
        mask[1] = False  # a query that sees no key
        mask[0, 0] = True
        return mask
    if kind == "float":
        bias = torch.randn(1, 1, m, n, generator=generator)
        bias[..., 1] = -math.inf
        return bias
    return None


def _slow_beyond(cases: dict, slow: set) -> list:
    """The names of `cases` in order, those in `slow` marked `slow`: each attention case compiles two or
    three kernels of its own (~7 s of a cold suite), and these repeat what other cases cover."""
    return [pytest.param(name, marks=pytest.mark.slow) if name in slow else name for name in sorted(cases)]


# an additive mask with a scale: test_additive_mask_broadcast_over_batch_and_heads_with_scale
@pytest.mark.parametrize("name", _slow_beyond(PRODUCT_CASES, {"additive_mask_scale"}))
def test_product_tiles_match_cpu(name):
    """Tiny calls take product tiles (no tl.dot) in the forward and in both backward kernels, so the
    backward recomputes the scores rounded as the forward rounded them."""
    (b, h, m, n, d), hk, kind, kwargs, tile = PRODUCT_CASES[name]
    q, k, v = _qkv(b, h, m, n, d, hk=hk, seed=len(name))
    mask = _product_mask(kind, m, n)
    check_sdpa(q, k, v, mask, **kwargs)
    dev = [t.to("rbln") for t in (q, k, v)]
    dev_mask = None if mask is None else mask.to("rbln")
    where = (dev_mask, kwargs.get("is_causal", False), kwargs.get("scale"))
    assert _forward_tile(*dev, *where) == tile
    assert _backward_tiles(*dev, *where) == [tile]  # the tiny kernel, one launch


ONE_TILE_DOT_CASES = {
    # name: ((b, h, m, n, d), hk, mask maker or None, sdpa kwargs, dtype): sequences of at most 16 with
    # a head dim past the product tiles: 16x16 tl.dot tiles, and the backward in one tiny launch
    "demo_causal": ((2, 4, 16, 16, 16), None, None, {"is_causal": True}, torch.float32),
    "gqa_bool_mask_partial": ((1, 4, 11, 16, 24), 2, "bool", {"enable_gqa": True}, torch.float32),
    "float_mask_kv_shorter": ((2, 2, 16, 9, 32), None, "float", {"scale": 0.4}, torch.float32),
    "causal_half": ((1, 2, 13, 13, 16), None, None, {"is_causal": True}, torch.float16),
}


# a float mask with a shorter key sequence: the product tiles' and CASES' masked cases
@pytest.mark.parametrize("name", _slow_beyond(ONE_TILE_DOT_CASES, {"float_mask_kv_shorter"}))
def test_short_sequences_backward_in_one_tiled_launch(name):
    """Sequences of at most 16 (`kernels.attention.one_launch_backward`) with a head dim past the
    product tiles: the forward takes the 16x16 tl.dot tile and the backward is one launch of the tiny
    kernel on that tile (one numba compile where the dQ and dK/dV kernels were two); gradients match
    the CPU, masked rows, partial tiles and grouped heads included."""
    (b, h, m, n, d), hk, kind, kwargs, dtype = ONE_TILE_DOT_CASES[name]
    q, k, v = _qkv(b, h, m, n, d, hk=hk, dtype=dtype, seed=len(name))
    mask = _product_mask(kind, m, n)
    check_sdpa(q, k, v, mask, **kwargs)
    dev = [t.to("rbln") for t in (q, k, v)]
    dev_mask = None if mask is None else mask.to("rbln")
    where = (dev_mask, kwargs.get("is_causal", False), kwargs.get("scale"))
    tile = (16, 16, max(16, 1 << (d - 1).bit_length()))
    assert _forward_tile(*dev, *where) == tile
    assert _backward_tiles(*dev, *where) == [tile]  # the tiny kernel, one launch


def test_a_sequence_past_one_tile_keeps_the_two_backward_kernels():
    q, k, v = (t.to("rbln") for t in _qkv(1, 2, 17, 16, 16, seed=2))
    g = A.geometry(q, k, None)
    assert not A._one_tile(g)
    calls = A._backward_calls(q, q, k, v, None, q, q, q, (q, k, v), g, None, True)
    K = A.O._k("attention")
    assert [call[0] for call in calls] == [K.attention_backward_dq_kernel, K.attention_backward_dkdv_kernel]


@pytest.mark.parametrize("dtype", [torch.float16, pytest.param(torch.bfloat16, marks=pytest.mark.slow)])
def test_product_tiles_half_precision_forward(dtype):
    # five query rows: an inference call of at most DECODE_ROWS takes the decode kernel instead
    q, k, v = _qkv(1, 2, 5, 4, 4, dtype=dtype, seed=7)
    check_sdpa(q, k, v, grad=False, is_causal=True)
    assert _forward_tile(*(t.to("rbln") for t in (q, k, v)), None, True) == (8, 8, 4)


def _hf_models():
    transformers = pytest.importorskip("transformers")
    transformers.utils.logging.set_verbosity_error()
    drop = {"resid_pdrop": 0.0, "embd_pdrop": 0.0, "attn_pdrop": 0.0}
    gpt2 = transformers.GPT2Config(n_layer=1, n_embd=32, n_head=2, vocab_size=64, n_positions=32,
                                   attn_implementation="sdpa", **drop)
    llama = transformers.LlamaConfig(num_hidden_layers=1, hidden_size=64, num_attention_heads=4,
                                     num_key_value_heads=2, intermediate_size=64, vocab_size=64,
                                     max_position_embeddings=32, attn_implementation="sdpa")
    return {"gpt2": lambda: transformers.GPT2LMHeadModel(gpt2),
            "llama": lambda: transformers.LlamaForCausalLM(llama)}


@pytest.mark.slow  # compiles every kernel of the model (embedding, layer norm, linear, ...) on a cold cache
@pytest.mark.parametrize("model", ["gpt2", "llama"])
def test_huggingface_sdpa_attention_runs_on_device(model):
    """HF models with attn_implementation="sdpa" (Llama: grouped-query attention via enable_gqa):
    logits and gradients match CPU, and every attention call ran on the flash kernels."""
    make = _hf_models()[model]
    torch.manual_seed(0)
    cpu_model = make()
    device_model = make()
    device_model.load_state_dict(cpu_model.state_dict())
    device_model.to("rbln")
    ids = torch.randint(0, 64, (2, 12), generator=torch.Generator().manual_seed(0))
    cpu_logits = cpu_model(ids).logits
    cpu_logits.square().mean().backward()
    registry.reset_fallback_report()
    logits = device_model(ids.to("rbln")).logits
    logits.square().mean().backward()
    torch.testing.assert_close(logits.detach().cpu(), cpu_logits.detach(), atol=1e-4, rtol=1e-4)
    for (name, p), c in zip(device_model.named_parameters(), cpu_model.parameters(), strict=True):
        torch.testing.assert_close(p.grad.cpu(), c.grad, atol=1e-5, rtol=1e-4,
                                   msg=lambda m, n=name: f"{n}: {m}")
    counts = registry.device_counts()
    assert counts[FORWARD] == 1 and counts[BACKWARD] == 1
    assert A.SDPA not in registry.fallback_report()


@pytest.mark.slow
@pytest.mark.parametrize("head_dim", [32, 64, 80, 128])
def test_head_dims(head_dim):
    check_sdpa(*_qkv(1, 2, 40, 50, head_dim, seed=head_dim), is_causal=True)


@pytest.mark.slow
def test_several_tiles_per_program_and_autotuned_tiles():
    """Sequences longer than the largest tile (several row/key blocks, a partial last one), with the
    autotuner limited to one trial per kernel (each trial is a compilation)."""
    from torch_rbln.autotune import tuning_options

    q, k, v = _qkv(1, 2, 150, 200, 64, seed=5)
    with tuning_options(max_trials=1):
        check_sdpa(q, k, v, torch.randn(1, 1, 150, 200), scale=0.1)
        check_sdpa(q, k, v, is_causal=True)


@pytest.mark.slow
def test_torch_compile_uses_the_flash_kernels():
    q, k, v = _qkv(1, 2, 16, 16, 16)

    def attention(q, k, v):
        return F.scaled_dot_product_attention(q, k, v, is_causal=True).sum(-1)

    compiled = torch.compile(attention, backend="rbln")
    dev = [_device(t, True) for t in (q, k, v)]
    cpu = [_leaf(t, True) for t in (q, k, v)]
    registry.reset_fallback_report()
    out = compiled(*dev)
    out.sum().backward()
    expected = attention(*cpu)
    expected.sum().backward()
    torch.testing.assert_close(out.detach().cpu(), expected.detach(), atol=2e-5, rtol=2e-5)
    torch.testing.assert_close(dev[0].grad.cpu(), cpu[0].grad, atol=2e-5, rtol=2e-5)
    assert registry.device_counts()[FORWARD] >= 1 and registry.device_counts()[BACKWARD] == 1


DECODE_CASES = {
    # name: ((b, h, m, n, d), hk, mask kind, sdpa kwargs, dtype): inference calls of at most DECODE_ROWS
    # query rows (a generation step's one per sequence) take `attention_decode_kernel`
    "one_row_two_key_blocks": ((2, 4, 1, 130, 16), None, None, {}, torch.float32),
    "gqa_one_row": ((1, 4, 1, 9, 16), 2, None, {"enable_gqa": True}, torch.float32),
    "causal_rows_see_the_top_left_triangle": ((1, 2, 3, 70, 24), None, None, {"is_causal": True},
                                              torch.float32),
    "bool_mask_with_a_blind_row": ((2, 2, 4, 5, 8), None, "bool", {}, torch.float32),
    "additive_mask_with_minus_inf_scale": ((1, 2, 3, 4, 3), None, "float", {"scale": 0.7}, torch.float32),
    "half_one_row": ((2, 2, 1, 40, 16), None, None, {}, torch.float16),
}


@pytest.mark.parametrize("name", sorted(DECODE_CASES))
def test_decode_rows_match_cpu(name):
    """Inference calls of a few query rows run the decode kernel (one program per row and head) and
    match the CPU: key blocks past the first, grouped heads, a causal triangle narrower than the keys,
    a query row that sees no key (0, as the forward kernel gives), a -inf bias, half precision."""
    (b, h, m, n, d), hk, kind, kwargs, dtype = DECODE_CASES[name]
    q, k, v = _qkv(b, h, m, n, d, hk=hk, dtype=dtype, seed=len(name))
    mask = _product_mask(kind, m, n)
    check_sdpa(q, k, v, mask, grad=False, **kwargs)
    dev = [t.to("rbln") for t in (q, k, v)]
    signed = A._INFERENCE.signature((*dev, None if mask is None else mask.to("rbln"),
                                     kwargs.get("is_causal", False), kwargs.get("scale"),
                                     kwargs.get("enable_gqa", False)), {})
    plan = A._inference_plans[signed[0]]
    assert plan.decode and plan.kernel is A.O._k("attention").attention_decode_kernel
    assert (plan.programs, plan.rows) == (m, b * h)


def test_a_growing_cache_takes_one_decode_specialisation_and_no_tuning(monkeypatch):
    """A decoding loop: every step's key/value length is new, so every step is a new structure. Each
    runs the decode kernel from its first call, on the one specialisation compiled for every length (the
    key block does not depend on the length), without the autotuner, and matches the CPU."""
    from torch_rbln.dsl.backends.numba_backend import executable
    from torch_rbln.registry import _launch

    def no_tuning(*args, **kwargs):
        raise AssertionError("a decode step went to the autotuned flash forward")

    q, k, v = _qkv(2, 2, 1, 40, 16, seed=11)
    dq = q.to("rbln")
    F.scaled_dot_product_attention(dq, k[:, :, :5].to("rbln"), v[:, :, :5].to("rbln"))  # compiled here
    monkeypatch.setattr(_launch, "tuned", no_tuning)
    compiles = executable.compile_count()[0]
    registry.reset_fallback_report()
    for n in range(6, 41, 3):
        out = F.scaled_dot_product_attention(dq, k[:, :, :n].to("rbln"), v[:, :, :n].to("rbln"))
        torch.testing.assert_close(out.cpu(), F.scaled_dot_product_attention(q, k[:, :, :n], v[:, :, :n]),
                                   atol=F32_TOL, rtol=F32_TOL)
    assert executable.compile_count()[0] == compiles
    assert registry.device_counts()[FORWARD] == 12


def test_calls_that_need_gradients_keep_the_flash_forward_for_one_row():
    """A one-row call that needs its gradient saves the flash forward's logsumexp for the backward,
    which recomputes the scores as that forward rounded them: it does not take the decode kernel."""
    q, k, v = _qkv(1, 2, 1, 20, 16, seed=5)
    check_sdpa(q, k, v)

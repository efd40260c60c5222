"""Conversions: a checkpoint tensor sent in another dtype than its parameter
is a write that converts, with exactly torch's ``Tensor.to()`` bytes.

Every bit pattern of bf16, f16 and both fp8 types, and a large f32 sample
with its edge cases (NaN payloads, infinities, subnormals, ties, values
past fp8's range), goes through a plan's converting write and must come out
as ``w.to(dtype)`` does, byte for byte, from full tensors and from boxes.
Then small models whose loaders cast (DeepSeek-V3's fp32
``e_score_correction_bias``, fp32 norms and router weights) plan all direct
and ``verify`` byte for byte; arithmetic after a cast still falls back,
with the reason of the first op that is not a conversion (Mamba's
``A_log``).
"""

from __future__ import annotations

import pytest
import torch
from torch import nn

import loadplan
from loadplan import ParamMeta

BF16, F16, F32 = torch.bfloat16, torch.float16, torch.float32
E4M3, E5M2 = torch.float8_e4m3fn, torch.float8_e5m2
FLOATS = [BF16, F16, F32, E4M3, E5M2]
BITS = {1: torch.uint8, 2: torch.uint16, 4: torch.uint32}


class Copies(nn.Module):
    """One parameter per name, loaded by ``loaders[name](param, w)``."""

    def __init__(self, params: dict, loaders: dict):
        super().__init__()
        for name, (shape, dtype) in params.items():
            self.register_parameter(name, nn.Parameter(torch.zeros(shape, dtype=dtype),
                                                       requires_grad=False))
        self.loaders = loaders

    def load_weights(self, weights):
        for name, w in weights:
            self.loaders[name](self, w)


def bits(t: torch.Tensor) -> torch.Tensor:
    return t.contiguous().view(BITS[t.element_size()])


def every_pattern(dtype: torch.dtype) -> torch.Tensor:
    """Every value of a 1- or 2-byte dtype; for f32 a large random sample
    plus every bf16/f16/fp8 value widened and nudged around it (ties,
    rounding boundaries), subnormals and the largest values."""
    size = torch.tensor([], dtype=dtype).element_size()
    if size < 4:
        return torch.arange(1 << (8 * size)).to(BITS[size]).view(dtype)
    gen = torch.Generator().manual_seed(0)
    parts = [torch.randint(0, 1 << 32, (1 << 18,), generator=gen)]
    for narrow in (BF16, F16, E4M3, E5M2):
        wide = bits(every_pattern(narrow).float()).to(torch.int64)
        for nudge in (-1, 0, 1, 1 << 12, (1 << 13) - 1, 1 << 13, 1 << 15, (1 << 16) - 1,
                      1 << 16, 1 << 19, 1 << 20, 1 << 21):
            parts.append((wide + nudge) & 0xFFFFFFFF)
    parts.append(torch.arange(0, 1 << 12))  # subnormals
    parts.append(torch.arange(0x7F7F0000, 0x7F810000, 7))  # largest finite, inf, NaN
    parts.append(torch.tensor([0x80000000, 0xFF800000, 0xFFC00000, 0x7FC00001]))
    return torch.cat(parts).to(torch.uint32).view(F32)


def plan_copy(src: torch.dtype, dst: torch.dtype, n: int, loader):
    model = Copies({"p": ((n,), dst)}, {"w": lambda m, w: loader(m.p.data, w)})
    plan = loadplan.plan_loads(model, [ParamMeta("w", (n,), src)])
    return model, plan


PAIRS = [(s, d) for s in FLOATS for d in FLOATS if s != d and (s, d) != (F16, F32)]


@pytest.mark.parametrize("src,dst", PAIRS, ids=[f"{s}-to-{d}".replace("torch.", "")
                                                for s, d in PAIRS])
def test_converting_write_equals_torch_to(src, dst):
    x = every_pattern(src)
    model, plan = plan_copy(src, dst, x.numel(), lambda p, w: p.copy_(w))
    entry = plan.entries["w"]
    assert entry.kind == "direct", entry.reason
    assert [w.convert_to for w in entry.writes] == [dst]
    expected = bits(x.to(dst))
    loadplan.load_planned(model, plan, [("w", x)])
    got = bits(model.p.data)
    bad = (got != expected).nonzero().flatten()
    assert bad.numel() == 0, [
        (hex(int(bits(x)[i])), hex(int(got[i])), hex(int(expected[i]))) for i in bad[:8]]
    # Packed boxes (as a sliced receiver gets them), another update.
    model.p.data.zero_()
    y = bits(x).flip(0).contiguous().view(src)
    plan.binding.apply_boxes([("w", box, y[tuple(slice(a, b) for a, b in box)].contiguous())
                              for box in plan.get_boxes("w")])
    assert torch.equal(bits(model.p.data), bits(y.to(dst)))


def test_float16_to_float32_stays_a_fallback():
    # torch widens a float16 NaN to other bits in a tensor's vectorized body
    # than in its tail: no write can match it.
    _, plan = plan_copy(F16, F32, 16, lambda p, w: p.copy_(w))
    entry = plan.entries["w"]
    assert entry.kind == "fallback"
    assert entry.reason == "casts float16 to float32 at copy_ (send it as float32 to make it direct)"


def test_to_then_copy_and_the_torch_path():
    # .to(dtype) then copy_, transposed and narrowed (a TP shard); the same
    # through torch's own copies (copy_with_torch, for targets the runtime
    # cannot bind) gives the same bytes.
    from loadplan.apply import copy_with_torch

    def load(m, w):
        m.p.data.copy_(w.narrow(0, 4, 4).t().to(F32))

    def make():
        return Copies({"p": ((8, 4), F32)}, {"w": load})

    metas = [ParamMeta("w", (8, 8), BF16)]
    model = make()
    plan = loadplan.plan_loads(model, metas)
    entry = plan.entries["w"]
    assert entry.kind == "direct" and entry.boxes == (((4, 8), (0, 8)),)
    assert entry.writes[0].convert_to == F32
    w = every_pattern(BF16)[30000:30064].reshape(8, 8)
    loadplan.load_planned(model, plan, [("w", w)])
    reference = make()
    reference.load_weights([("w", w)])
    assert torch.equal(bits(model.p.data), bits(reference.p.data))
    model.p.data.zero_()
    copy_with_torch(plan, [("w", w)])
    assert torch.equal(bits(model.p.data), bits(reference.p.data))
    assert loadplan.verify(make, metas)


class Router(nn.Module):
    """DeepSeek-V3-like pieces a bf16 checkpoint loads into fp32 parameters
    at TP=2, rank 1: the gate's ``e_score_correction_bias`` and router
    weight (``default_weight_loader``'s copy_ across dtypes), an fp32 norm
    loaded as ``w.to(torch.float32)``, a column-parallel bias narrowed then
    copied, and a bf16 weight converted to fp8 for an fp8 engine; next to
    them, bf16 copies as before."""

    def __init__(self):
        super().__init__()
        f = lambda *s, dtype=F32: nn.Parameter(torch.zeros(s, dtype=dtype), requires_grad=False)
        self.e_score_correction_bias = f(16)
        self.router = f(16, 32)
        self.norm = f(32)
        self.bias = f(8)
        self.w8 = f(8, 32, dtype=E4M3)
        self.proj = f(8, 32, dtype=BF16)

    def load_weights(self, weights):
        for name, w in weights:
            if name == "gate.e_score_correction_bias":
                self.e_score_correction_bias.data.copy_(w)
            elif name == "gate.weight":
                self.router.data.copy_(w)
            elif name == "norm.weight":
                self.norm.data.copy_(w.to(torch.float32))
            elif name == "up.bias":
                self.bias.data.copy_(w.narrow(0, 8, 8))
            elif name == "up8.weight":
                self.w8.data.copy_(w.narrow(0, 8, 8))
            elif name == "proj.weight":
                self.proj.data.copy_(w.narrow(0, 8, 8))


ROUTER_METAS = [
    ParamMeta("gate.e_score_correction_bias", (16,), BF16),
    ParamMeta("gate.weight", (16, 32), BF16),
    ParamMeta("norm.weight", (32,), BF16),
    ParamMeta("up.bias", (16,), BF16),
    ParamMeta("up8.weight", (16, 32), BF16),
    ParamMeta("proj.weight", (16, 32), BF16),
]


def test_bf16_checkpoint_into_fp32_and_fp8_parameters_is_all_direct():
    plan = loadplan.plan_loads(Router(), ROUTER_METAS)
    kinds = {n: e.kind for n, e in plan.entries.items()}
    assert kinds == {m.name: "direct" for m in ROUTER_METAS}, {
        n: e.reason for n, e in plan.entries.items()}
    converts = {n: e.writes[0].convert_to for n, e in plan.entries.items()}
    assert converts == {"gate.e_score_correction_bias": F32, "gate.weight": F32,
                        "norm.weight": F32, "up.bias": F32, "up8.weight": E4M3,
                        "proj.weight": None}
    # What moves is the checkpoint's bf16 bytes of this rank's boxes.
    assert plan.entries["up.bias"].nbytes == 8 * 2
    # get_dest gives views in the dtype written.
    [(box, view)] = plan.get_dest("gate.weight")
    assert view.dtype == F32 and box == ((0, 16), (0, 32))
    result = loadplan.verify(Router, ROUTER_METAS, rounds=3)
    assert result.ok, result.mismatches


def test_a_batch_in_the_parameters_dtype_is_refused_whole():
    model = Router()
    plan = loadplan.plan_loads(model, ROUTER_METAS)
    before = {n: p.clone() for n, p in model.named_parameters()}
    good = [(m.name, torch.randn(m.shape).to(BF16)) for m in ROUTER_METAS]
    bad = good[:-1] + [("norm.weight", torch.randn(32, dtype=F32))]
    with pytest.raises(ValueError, match="'norm.weight' is torch.float32 \\(32,\\), declared "
                                         "torch.bfloat16"):
        loadplan.load_planned(model, plan, bad)
    for n, p in model.named_parameters():
        assert torch.equal(bits(p.data), bits(before[n])), n
    loadplan.load_planned(model, plan, good)
    assert torch.equal(model.norm.data, good[2][1].float())


class Mamba(nn.Module):
    """Mamba's ``A_log``: ``-torch.exp(w.float())``; and a per-tensor fp8
    scale applied after a cast."""

    def __init__(self):
        super().__init__()
        self.A = nn.Parameter(torch.zeros(8, dtype=F32), requires_grad=False)
        self.w = nn.Parameter(torch.zeros(8, dtype=E4M3), requires_grad=False)

    def load_weights(self, weights):
        for name, w in weights:
            if name == "A_log":
                self.A.data.copy_(-torch.exp(w.float()))
            else:
                self.w.data.copy_((w.float() * 0.5).to(E4M3))


@pytest.mark.parametrize("dtype", [BF16, F32])
def test_arithmetic_after_a_cast_names_the_arithmetic(dtype):
    metas = [ParamMeta("A_log", (8,), dtype), ParamMeta("scaled", (8,), BF16)]
    plan = loadplan.plan_loads(Mamba(), metas)
    a_log, scaled = plan.entries["A_log"], plan.entries["scaled"]
    assert a_log.kind == "fallback" and a_log.reason == "applies aten.exp to it"
    assert scaled.kind == "fallback" and scaled.reason == "applies aten.mul.Tensor to it"
    assert loadplan.verify(Mamba, metas)

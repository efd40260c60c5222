"""``loadplan.vllm.rearrange``: vLLM's processing that only moves elements,
traced data-free on the meta device and composed with a loader's writes,
checked byte for byte against the same processing run on real tensors."""

from __future__ import annotations

import pytest
import torch

pytest.importorskip("vllm")

import vllm.model_executor.layers.fused_moe  # noqa: E402,F401  (vLLM's import order)
from vllm.model_executor.layers.quantization.utils.flashinfer_utils import (  # noqa: E402
    _shuffle_deepseek_fp8_moe_weights,
    swap_w13_to_w31,
)
from vllm.model_executor.utils import replace_parameter  # noqa: E402

import loadplan  # noqa: E402
from loadplan.vllm import rearrange as ra  # noqa: E402

E, I, H = 3, 128, 256  # experts, intermediate, hidden: BlockMajorK needs % 128


class Experts(torch.nn.Module):
    """The tensors of a block-fp8 MoE layer in its checkpoint format."""

    def __init__(self, device: str):
        super().__init__()

        def param(*shape, dtype=torch.float8_e4m3fn):
            return torch.nn.Parameter(torch.empty(*shape, dtype=dtype, device=device),
                                      requires_grad=False)

        self.w13_weight = param(E, 2 * I, H)
        self.w2_weight = param(E, H, I)
        self.w13_weight_scale_inv = param(E, 2 * I // 128, H // 128, dtype=torch.float32)
        self.w2_weight_scale_inv = param(E, H // 128, I // 128, dtype=torch.float32)


def trtllm(layer: Experts) -> None:
    """What vLLM's ``prepare_fp8_moe_layer_for_fi`` does for FlashInfer's
    TRT-LLM block-fp8 experts, with vLLM's own functions: the w13 halves
    swapped, the rows shuffled into BlockMajorK order, the scales clamped."""
    w13 = swap_w13_to_w31(layer.w13_weight)
    s13 = swap_w13_to_w31(layer.w13_weight_scale_inv)
    w13, w2 = _shuffle_deepseek_fp8_moe_weights(w13, layer.w2_weight)
    s13.clamp_(min=1e-10)
    layer.w2_weight_scale_inv.clamp_(min=1e-10)
    replace_parameter(layer, "w13_weight", w13)
    replace_parameter(layer, "w2_weight", w2)
    replace_parameter(layer, "w13_weight_scale_inv", s13)
    replace_parameter(layer, "w2_weight_scale_inv", layer.w2_weight_scale_inv)


def checkpoint(seed: int) -> dict[str, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    out = {}
    for name, t in Experts("meta").named_parameters():
        if t.dtype == torch.float32:
            # Some scales below the clamp, as dead experts have.
            scale = torch.rand(t.shape, generator=g)
            out[name] = torch.where(scale < 0.3, torch.full_like(scale, 1e-23), scale)
        else:
            out[name] = torch.randint(0, 256, t.shape, dtype=torch.uint8,
                                      generator=g).view(t.dtype)
    return out


def processed(values: dict[str, torch.Tensor], process,
              module: type[torch.nn.Module] = Experts) -> dict[str, torch.Tensor]:
    """``module``'s tensors holding ``values``, after ``process``."""
    layer = module("cpu")
    for name, t in layer.named_parameters():
        t.data.copy_(values[name])
    process(layer)
    return {n: t.data for n, t in layer.named_parameters()}


def traced(process) -> tuple[ra.Rearranged, dict[str, torch.Tensor]]:
    live = processed(checkpoint(0), process)
    layer = Experts("meta")
    return ra.trace(layer, dict(layer.named_parameters()), live, lambda: process(layer)), live


def boxes(name: str, t: torch.Tensor):
    """The regions a loader writes into the checkpoint format: per expert,
    w13's gate and up halves apart (each a checkpoint name), else whole."""
    halves = 2 if name.startswith("w13") else 1
    rows = t.shape[1] // halves
    for e in range(t.shape[0]):
        for h in range(halves):
            yield t[e, h * rows:(h + 1) * rows]


def test_fit_folds_digit_permutations_and_refuses_others():
    # FlashInfer's 16-row shuffle: row r of a group goes to r // 2 + 8 * (r % 2).
    rows = torch.arange(64)
    shuffled = (rows // 16) * 16 + (rows % 16) // 2 + 8 * (rows % 2)
    modes = ra.fit(shuffled)
    assert modes == ((4, 16), (8, 1), (2, 8))
    assert torch.equal(ra.evaluate(modes, rows), shuffled)
    assert ra.fit(torch.arange(12) * 5) == ((12, 5),)
    assert ra.fit(torch.randperm(64, generator=torch.Generator().manual_seed(1))) is None
    assert ra.fit(torch.tensor([1, 2, 3])) is None  # does not start at 0


def test_compose_refuses_a_region_whose_digits_carry():
    modes = ((4, 100), (8, 1))  # a 4x8 index space; its rows 100 apart
    assert ra.compose(modes, 0, 8, (2, 8), (8, 1)) == (100, (((2, 100),), ((8, 1),)))
    # Rows 4 to 11 cross from one row of modes into the next: no strides.
    assert ra.compose(modes, 0, 4, (8,), (1,)) is None
    assert ra.compose(modes, 0, 24, (2, 8), (8, 1)) is None  # past the end


def test_trtllm_block_fp8_experts_are_composed_byte_for_byte():
    what, _ = traced(trtllm)
    assert set(what.sources) == {"w13_weight", "w2_weight", "w13_weight_scale_inv",
                                 "w2_weight_scale_inv"}
    assert {n: [op for op, _, _ in ops] for n, ops in what.epilogues.items()} == {
        "w13_weight_scale_inv": ["clamp_"], "w2_weight_scale_inv": ["clamp_"]}
    for seed in (1, 2):
        values = checkpoint(seed)
        want = processed(values, trtllm)
        assert want["w13_weight"].shape == (E, H // 128, 2 * I, 128)  # BlockMajorK
        got = {n: torch.zeros_like(t) for n, t in want.items()}
        for name, t in values.items():
            for box in boxes(name, t.contiguous()):
                writes = what.remap(name, box.storage_offset(), box.shape, box.stride())
                assert not isinstance(writes, str), writes
                for live, offset, shape, stride in writes:
                    # Each write splits the box's dims, in order.
                    assert len(shape) >= box.dim()
                    torch.as_strided(got[live], shape, stride, offset).copy_(box.reshape(shape))
        layer = Experts("cpu")
        for name, t in layer.named_parameters():
            t.data = got[name]
        what.run_epilogues(layer)
        for name, t in want.items():
            assert torch.equal(got[name].view(torch.uint8), t.view(torch.uint8)), name


def test_a_write_across_the_swapped_halves_runs_backwards_through_them():
    what, live = traced(trtllm)
    values = checkpoint(0)
    # The whole of one expert's w13 (both halves): a dim of 2 that steps
    # back, the swap.
    writes = what.remap("w13_weight", 0, (2 * I, H), (H, 1))
    assert not isinstance(writes, str), writes
    [(name, offset, shape, stride)] = writes
    backwards = [d for d, st in enumerate(stride) if st < 0]
    assert [shape[d] for d in backwards] == [2]
    got = torch.zeros_like(live["w13_weight"])
    box = values["w13_weight"][0].reshape(shape)
    for k in range(2):  # one copy per index of it, as the capture records
        d = backwards[0]
        kept = [i for i in range(len(shape)) if i != d]
        torch.as_strided(got, [shape[i] for i in kept], [stride[i] for i in kept],
                         offset + k * stride[d]).copy_(box.select(d, k))
    assert torch.equal(got[0].view(torch.uint8), live["w13_weight"][0].view(torch.uint8))


@pytest.mark.parametrize("process, says", [
    (lambda layer: replace_parameter(layer, "w2_weight_scale_inv",
                                     layer.w2_weight_scale_inv * 2), "computes mul"),
    # A conversion of moved elements, or of part of a tensor.
    (lambda layer: replace_parameter(layer, "w2_weight",
                                     layer.w2_weight.transpose(1, 2).to(torch.bfloat16)),
     "converts w2_weight to torch.bfloat16 after moving"),
    (lambda layer: replace_parameter(layer, "w2_weight",
                                     layer.w2_weight[:1].to(torch.bfloat16)),
     "converts w2_weight to torch.bfloat16 after moving"),
    (lambda layer: replace_parameter(
        layer, "w2_weight",
        layer.w2_weight[:, torch.randperm(H, generator=torch.Generator().manual_seed(0))]),
     "folds into no modes"),
    # Two bytes that come from different places make no element.
    (lambda layer: replace_parameter(
        layer, "w2_weight",
        layer.w2_weight.transpose(1, 2).contiguous().view(torch.int16).clone()),
     "as torch.int16 splits its elements"),
])
def test_processing_that_is_no_rearrangement_is_refused_with_its_step(process, says):
    layer = Experts("meta")
    live = processed(checkpoint(0), lambda real: None)
    with pytest.raises(ra.NotRearrangement, match=says):
        ra.trace(layer, dict(layer.named_parameters()), live, lambda: process(layer))


def test_a_traced_layout_unlike_the_engines_is_refused():
    layer = Experts("meta")
    live = processed(checkpoint(0), lambda real: None)  # the engine's: not processed
    with pytest.raises(ra.NotRearrangement, match="the engine's is"):
        ra.trace(layer, dict(layer.named_parameters()), live, lambda: trtllm(layer))


# -- the capture, redirected ---------------------------------------------------

R, C = 8, 16  # each half's rows, the columns


class Fused(torch.nn.Module):
    """A gate/up projection: checkpoint names ``gate`` and ``up`` (``[R, C]``
    each) load into the halves of ``proj.weight`` (``[2R, C]``), ``both``
    into all of it."""

    def __init__(self, device: str):
        super().__init__()
        self.proj = torch.nn.Module()
        self.proj.weight = torch.nn.Parameter(
            torch.empty(2 * R, C, dtype=torch.bfloat16, device=device), requires_grad=False)

    def load_weights(self, weights):
        for name, w in weights:
            rows = {"gate": slice(0, R), "up": slice(R, 2 * R), "both": slice(0, 2 * R)}[name]
            self.proj.weight.data[rows].copy_(w)


def swap_and_transpose(proj: torch.nn.Module) -> None:
    """A processing that only moves elements, into a tensor of another
    shape: the halves swapped (vLLM's own swap), then transposed."""
    proj.weight.data = swap_w13_to_w31(proj.weight).t().contiguous()


def plan_rearranged(model: Fused, metas):
    """``plan_loads`` of ``model`` (processed, live) as the vLLM worker
    plans a rearranged layer: its targets taken live, then the loader
    traced into its checkpoint format, redirected."""
    from loadplan.capture import Redirect, Targets, storage_key

    live = model.proj.weight
    stand_in = Fused("meta")
    what = ra.trace(stand_in.proj, {"weight": stand_in.proj.weight}, {"weight": live.data},
                    lambda: swap_and_transpose(stand_in.proj))
    targets = Targets(model)
    [target] = [t for t in targets.targets if t.qualified_name == "proj.weight"]

    def remap(offset, shape, stride):
        found = what.remap("weight", offset, shape, stride)
        return found if isinstance(found, str) else [(target, *rest) for _, *rest in found]

    checkpoint = torch.nn.Parameter(torch.empty(2 * R, C, dtype=torch.bfloat16, device="meta"),
                                    requires_grad=False)
    model.proj.weight = checkpoint
    try:
        return loadplan.plan_loads(model, metas, targets=targets, redirects={
            storage_key(checkpoint): Redirect("proj", "weight", torch.bfloat16, remap)})
    finally:
        model.proj.weight = live


def test_the_loader_writes_straight_to_where_the_processing_puts_each_element():
    from loadplan import ParamMeta

    g = torch.Generator().manual_seed(3)
    gate, up = (torch.randn(R, C, generator=g).to(torch.bfloat16) for _ in range(2))
    reference = Fused("cpu")
    reference.load_weights([("gate", gate), ("up", up)])
    swap_and_transpose(reference.proj)
    model = Fused("cpu")
    model.load_weights([("gate", up), ("up", gate)])
    swap_and_transpose(model.proj)  # the engine at start-up: other values
    metas = [ParamMeta("gate", (R, C), torch.bfloat16), ParamMeta("up", (R, C), torch.bfloat16)]
    plan = plan_rearranged(model, metas)
    assert {n: e.kind for n, e in plan.entries.items()} == {"gate": "direct", "up": "direct"}
    # gate's rows are the second half of each live row: columns R..2R.
    [write] = plan.entries["gate"].writes
    assert (write.offset, write.shape, write.stride) == (R, (R, C), (1, 2 * R))
    loadplan.load_planned(model, plan, [("gate", gate), ("up", up)])
    assert torch.equal(model.proj.weight.view(torch.int16),
                       reference.proj.weight.view(torch.int16))


def test_a_write_across_the_swap_is_one_copy_per_half():
    from loadplan import ParamMeta

    g = torch.Generator().manual_seed(4)
    both = torch.randn(2 * R, C, generator=g).to(torch.bfloat16)
    reference = Fused("cpu")
    reference.load_weights([("both", both)])
    swap_and_transpose(reference.proj)
    model = Fused("cpu")
    model.load_weights([("both", torch.zeros(2 * R, C, dtype=torch.bfloat16))])
    swap_and_transpose(model.proj)
    plan = plan_rearranged(model, [ParamMeta("both", (2 * R, C), torch.bfloat16)])
    entry = plan.entries["both"]
    # The halves' dim steps back through the live tensor: a copy for each.
    assert entry.kind == "direct" and len(entry.writes) == 2
    assert all(min(w.stride) >= 0 for w in entry.writes)
    loadplan.load_planned(model, plan, [("both", both)])
    assert torch.equal(model.proj.weight.view(torch.int16),
                       reference.proj.weight.view(torch.int16))


def test_a_write_across_the_halves_is_written_in_parts_at_the_swap():
    from loadplan import ParamMeta

    g = torch.Generator().manual_seed(5)
    mid = torch.randn(R, C, generator=g).to(torch.bfloat16)
    reference = Fused("cpu")
    reference.load_weights([("both", torch.zeros(2 * R, C, dtype=torch.bfloat16))])
    reference.proj.weight.data[R // 2:R // 2 + R].copy_(mid)
    swap_and_transpose(reference.proj)
    model = Fused("cpu")
    model.load_weights([("both", torch.zeros(2 * R, C, dtype=torch.bfloat16))])
    swap_and_transpose(model.proj)
    # Rows R/2 to 3R/2 cross from one half into the other: no strides take
    # them whole, but each half's part folds.
    model.load_weights = lambda weights: [
        model.proj.weight.data[R // 2:R // 2 + R].copy_(w) for _, w in weights]
    plan = plan_rearranged(model, [ParamMeta("mid", (R, C), torch.bfloat16)])
    entry = plan.entries["mid"]
    assert entry.kind == "direct", entry.reason
    assert sorted(entry.boxes) == [((0, R // 2), (0, C)), ((R // 2, R), (0, C))]
    loadplan.load_planned(model, plan, [("mid", mid)])
    assert torch.equal(model.proj.weight.view(torch.int16),
                       reference.proj.weight.view(torch.int16))


# -- FlashInfer TRT-LLM's bf16 experts: padding zeroed, rows permuted in place --

P = 128  # the intermediate, padded; I of it loaded (32)
I16 = 32


class Experts16(torch.nn.Module):
    def __init__(self, device: str):
        super().__init__()
        self.w13_weight = torch.nn.Parameter(
            torch.empty(E, 2 * P, H, dtype=torch.bfloat16, device=device), requires_grad=False)
        self.w2_weight = torch.nn.Parameter(
            torch.empty(E, H, P, dtype=torch.bfloat16, device=device), requires_grad=False)


def trtllm_bf16(layer: Experts16) -> None:
    """vLLM's FlashInfer TRT-LLM bf16 processing, with its own functions:
    the padding zeroed, then each expert's rows permuted into BlockMajorK
    order in place, through one expert's scratch."""
    from types import SimpleNamespace

    from vllm.model_executor.layers.fused_moe.oracle.unquantized import (
        _zero_intermediate_padding,
    )
    from vllm.model_executor.layers.quantization.utils.flashinfer_utils import (
        convert_moe_weights_to_flashinfer_trtllm_block_layout,
    )

    config = SimpleNamespace(intermediate_size_per_partition_unpadded=I16,
                             intermediate_size_per_partition=P, is_act_and_mul=True)
    _zero_intermediate_padding(config, layer.w13_weight, layer.w2_weight)
    convert_moe_weights_to_flashinfer_trtllm_block_layout({}, layer.w13_weight, layer.w2_weight)


def test_trtllm_bf16_experts_in_place_with_padding_are_composed_byte_for_byte():
    layer = Experts16("meta")
    g = torch.Generator().manual_seed(5)
    values = {n: torch.randn(t.shape, generator=g).to(torch.bfloat16)
              for n, t in layer.named_parameters()}  # padding too: it must be zeroed
    real = Experts16("cpu")
    for n, t in real.named_parameters():
        t.data.copy_(values[n])
    trtllm_bf16(real)
    want = {n: t.data for n, t in real.named_parameters()}
    what = ra.trace(layer, dict(layer.named_parameters()), want, lambda: trtllm_bf16(layer))
    assert set(what.zeroed) == {"w13_weight", "w2_weight"}
    # What a loader writes: per expert the gate rows, the up rows, w2's columns.
    regions = []
    for e in range(E):
        for rows in (slice(0, I16), slice(P, P + I16)):
            regions.append(("w13_weight", values["w13_weight"][e, rows]))
        regions.append(("w2_weight", values["w2_weight"][e, :, :I16]))
    got = {n: torch.full_like(t, 3.0) for n, t in want.items()}  # what the writes miss shows
    for name, box in regions:
        full = values[name]
        offset = box.data_ptr() // 2 - full.data_ptr() // 2
        writes = what.remap(name, offset, box.shape, box.stride())
        assert not isinstance(writes, str), writes
        for live, off, shape, stride in writes:
            torch.as_strided(got[live], shape, stride, off).copy_(box.reshape(shape))
    for live, off, shape, stride in what.zero_places:  # as the worker's proof does
        torch.as_strided(got[live].view(-1).view(torch.uint8), shape, stride, off).zero_()
    for name, t in want.items():
        assert torch.equal(got[name].view(torch.int16), t.view(torch.int16)), name
    # A write that reaches the padding would be zeroed by the processing.
    why = what.remap("w13_weight", 0, (I16 + 1, H), (H, 1))
    assert isinstance(why, str) and "zeroes" in why


# -- gpt-oss's mxfp4 experts on FlashInfer TRT-LLM: biases converted ---------

class Biased(torch.nn.Module):
    """An expert layer's bf16 biases in their checkpoint format."""

    def __init__(self, device: str):
        super().__init__()
        self.w13_bias = torch.nn.Parameter(
            torch.empty(E, 2 * I, dtype=torch.bfloat16, device=device), requires_grad=False)
        self.w2_bias = torch.nn.Parameter(
            torch.empty(E, H, dtype=torch.bfloat16, device=device), requires_grad=False)


def swap_pairs_fp32(layer: Biased) -> None:
    """What FlashInfer TRT-LLM's mxfp4 processing does to the biases: fp32,
    each pair of w13's entries swapped, each expert's rows gathered, the
    experts stacked into new tensors."""
    w13 = layer.w13_bias.data.to(torch.float32)
    w2 = layer.w2_bias.data.to(torch.float32)
    w13 = w13.reshape(E, I, 2).flip(2).reshape(E, 2 * I)
    rows = torch.arange(2 * I).view(-1, 16).flip(1).reshape(-1)  # a constant permutation
    w13 = torch.stack([w13[e].clone().reshape(-1, 1)[rows].contiguous() for e in range(E)])
    replace_parameter(layer, "w13_bias", w13.reshape(E, -1))
    replace_parameter(layer, "w2_bias", torch.cat([w2[e:e + 1] for e in range(E)]))


def test_a_whole_tensor_converted_before_it_moves_is_written_converted():
    g = torch.Generator().manual_seed(6)
    values = {n: torch.randn(t.shape, generator=g).to(torch.bfloat16)
              for n, t in Biased("meta").named_parameters()}
    real = Biased("cpu")
    for n, t in real.named_parameters():
        t.data.copy_(values[n])
    swap_pairs_fp32(real)
    want = {n: t.data for n, t in real.named_parameters()}
    layer = Biased("meta")
    what = ra.trace(layer, dict(layer.named_parameters()), want, lambda: swap_pairs_fp32(layer))
    assert what.converted == {"w13_bias": torch.float32, "w2_bias": torch.float32}
    got = {n: torch.zeros_like(t) for n, t in want.items()}
    for name, full in values.items():
        for e in range(E):  # per expert, as vLLM's loader writes them
            box = full[e]
            writes = what.remap(name, box.storage_offset(), box.shape, box.stride())
            assert not isinstance(writes, str), writes
            for live, offset, shape, stride in writes:
                view, part = got[live].view(-1), box.reshape(shape)
                for d in [d for d, st in enumerate(stride) if st < 0]:  # each pair's flip
                    offset += (shape[d] - 1) * stride[d]
                    stride = (*stride[:d], -stride[d], *stride[d + 1:])
                    part = part.flip(d)
                torch.as_strided(view, shape, stride, offset).copy_(part)  # converts
    for name, t in want.items():
        assert torch.equal(got[name], t), name


def test_a_source_both_as_it_is_and_converted_is_refused():
    def both(layer: Biased) -> None:
        w13 = layer.w13_bias.data
        replace_parameter(layer, "w2_bias", w13[:, :H].clone())
        replace_parameter(layer, "w13_bias", w13.to(torch.float32))

    real = Biased("cpu")
    both(real)
    layer = Biased("meta")
    with pytest.raises(ra.NotRearrangement, match="both as it is and converted"):
        ra.trace(layer, dict(layer.named_parameters()),
                 {n: t.data for n, t in real.named_parameters()}, lambda: both(layer))


# -- Marlin's int4 experts: padding and a 4-bit repack -------------------------

E4, S4, H4, G4 = 2, 96, 128, 32  # experts, intermediate (this rank's), hidden, group
P4 = 128  # the intermediate padded to Marlin's thread tile (a multiple of 64)


class Int4Experts(torch.nn.Module):
    """The tensors of a compressed-tensors W4A16 MoE layer (pack-quantized,
    Kimi-K2's experts) in its checkpoint format, at tensor parallelism 2:
    this rank's intermediate is ``S4`` (96: not a multiple of Marlin's 64,
    padded to 128; or 128 with ``Int4Experts.S = 128``, unpadded)."""

    S = S4

    def __init__(self, device: str):
        super().__init__()
        S4 = self.S  # noqa: N806 - the module's name for it

        def param(*shape, dtype=torch.int32):
            return torch.nn.Parameter(torch.empty(*shape, dtype=dtype, device=device),
                                      requires_grad=False)

        self.w13_weight_packed = param(E4, 2 * S4, H4 // 8)
        self.w2_weight_packed = param(E4, H4, S4 // 8)
        self.w13_weight_scale = param(E4, 2 * S4, H4 // G4, dtype=torch.bfloat16)
        self.w2_weight_scale = param(E4, H4, S4 // G4, dtype=torch.bfloat16)


def marlin_int4(layer: Int4Experts) -> None:
    """What vLLM's ``_process_weights_marlin`` does to int4 experts, with
    vLLM's own functions: K-first, the intermediate zero-padded to 128,
    each expert repacked by ``torch.ops._C.gptq_marlin_repack`` (its GPU
    op, defined by vllm_steer on its torch reference), scales permuted."""
    import vllm._custom_ops as ops

    S4 = layer.S  # noqa: N806
    from vllm.model_executor.layers.fused_moe.oracle.int_wna16 import (
        _pad_rows,
        _pad_w13_shard_cols,
    )
    from vllm.model_executor.layers.quantization.utils.marlin_utils import (
        marlin_moe_permute_scales,
    )

    w13 = layer.w13_weight_packed.transpose(1, 2).contiguous()
    w2 = layer.w2_weight_packed.transpose(1, 2).contiguous()
    s13 = layer.w13_weight_scale.transpose(1, 2).contiguous()
    s2 = layer.w2_weight_scale.transpose(1, 2).contiguous()
    w13, s13 = _pad_w13_shard_cols(w13, S4, P4), _pad_w13_shard_cols(s13, S4, P4)
    w2, s2 = _pad_rows(w2, P4 // 8), _pad_rows(s2, P4 // G4)
    w13 = ops.gptq_marlin_moe_repack(w13, w13.shape[1] * 8, w13.shape[2], 4)
    w2 = ops.gptq_marlin_moe_repack(w2, w2.shape[1] * 8, w2.shape[2], 4)
    s13 = marlin_moe_permute_scales(s13, size_k=S4, size_n=s13.shape[2], group_size=G4)
    s2 = marlin_moe_permute_scales(s2, size_k=s2.shape[1] * G4, size_n=s2.shape[2],
                                   group_size=G4)
    for name, t in (("w13_weight_packed", w13), ("w2_weight_packed", w2),
                    ("w13_weight_scale", s13), ("w2_weight_scale", s2)):
        replace_parameter(layer, name, t)


def int4_checkpoint(seed: int) -> dict[str, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    out = {}
    for name, t in Int4Experts("meta").named_parameters():
        if t.dtype == torch.int32:
            out[name] = torch.randint(-2**31, 2**31, t.shape, generator=g,
                                      dtype=torch.int64).to(torch.int32)
        else:
            out[name] = (torch.rand(t.shape, generator=g) + 0.01).to(t.dtype)
    return out


def written(what: ra.Rearranged, values: dict[str, torch.Tensor], want: dict[str, torch.Tensor],
            boxes_of) -> tuple[dict[str, torch.Tensor], int]:
    """The live tensors as ``what``'s writes of each of ``boxes_of``'s
    boxes of ``values`` leave them (a ``marlin_w4`` part through the
    runtime's transform, in torch), the padding zeroed as the worker's
    proof does, checked byte for byte against ``want``; and how many
    writes went through the transform."""
    from loadplan.vllm import kernel_refs

    # What the writes miss shows, but for the padding.
    got = {n: torch.full_like(t.view(torch.uint8), 0xA5).view(t.dtype) for n, t in want.items()}
    transformed = 0
    for name, t in values.items():
        for box in boxes_of(name, t.contiguous()):
            writes = what.remap(name, box.storage_offset(), box.shape, box.stride())
            assert not isinstance(writes, str), writes
            for live_name, offset, shape, stride, *how in writes:
                part = box
                if how:  # a part of the box, maybe through a transform
                    transform, sub = how[0]
                    part = box[tuple(slice(a, b) for a, b in sub)]
                    if transform is not None:
                        assert transform == "marlin_w4"
                        part = kernel_refs.marlin_w4_transform(part)
                        transformed += 1
                torch.as_strided(got[live_name], shape, stride, offset).copy_(part.reshape(shape))
    for live_name, offset, shape, stride in what.zero_places:
        t = got[live_name]
        torch.as_strided(t.view(-1).view(torch.uint8), shape, stride, offset).zero_()
    for name, t in want.items():
        assert torch.equal(got[name].view(torch.uint8), t.view(torch.uint8)), name
    return got, transformed


@pytest.mark.parametrize("intermediate", [S4, P4], ids=["padded", "unpadded"])
def test_marlin_int4_experts_are_composed_through_padding_and_the_repack(monkeypatch,
                                                                         intermediate):
    import vllm_steer

    vllm_steer._define_marlin_repack()
    monkeypatch.setattr(Int4Experts, "S", intermediate)

    def processed4(values):
        return processed(values, marlin_int4, Int4Experts)

    live = processed4(int4_checkpoint(0))
    meta = Int4Experts("meta")
    what = ra.trace(meta, dict(meta.named_parameters()), live, lambda: marlin_int4(meta))
    assert set(what.sources) == set(live)
    assert bool(what.zero_places) == (intermediate < P4)  # the padding, weights and scales
    for seed in (1, 2):
        values = int4_checkpoint(seed)
        want = processed4(values)
        got, transformed = written(what, values, want, boxes)
        # Gate and up of each expert: a tile of 64 rows and two subtiles
        # apart; each expert's down whole.
        assert transformed == E4 * 2 * (2 if intermediate < P4 else 1) + E4
        for name, t in want.items():
            assert torch.equal(got[name].view(torch.uint8), t.view(torch.uint8)), name


def test_a_write_that_cuts_marlins_atoms_is_refused_with_why():
    import vllm_steer

    vllm_steer._define_marlin_repack()
    live = {n: t for n, t in Int4Experts("meta").named_parameters()}
    cpu = Int4Experts("cpu")
    for t in cpu.parameters():
        t.data.zero_()
    marlin_int4(cpu)
    meta = Int4Experts("meta")
    what = ra.trace(meta, dict(meta.named_parameters()), dict(cpu.named_parameters()),
                    lambda: marlin_int4(meta))
    del live
    # Rows 8 to 40 of expert 0's gate: they start inside an atom.
    t = torch.empty(E4, 2 * S4, H4 // 8, dtype=torch.int32)
    says = what.remap("w13_weight_packed", t[0, 8:40].storage_offset(), (32, H4 // 8),
                      (H4 // 8, 1))
    assert says == "a write into w13_weight_packed@pad0 that cuts Marlin's atoms (16 rows " \
                   "of N by 2 words of K)"


K5, G5 = 256, 32  # a dense int4 linear: inputs, group


class Int4Linear(torch.nn.Module):
    """A compressed-tensors W4A16 linear (pack-quantized) in its checkpoint
    format, with ``N`` outputs (96: padded to Marlin's 128 by the
    processing)."""

    N = 128

    def __init__(self, device: str):
        super().__init__()
        self.weight_packed = torch.nn.Parameter(
            torch.empty(self.N, K5 // 8, dtype=torch.int32, device=device), requires_grad=False)
        self.weight_scale = torch.nn.Parameter(
            torch.empty(self.N, K5 // G5, dtype=torch.bfloat16, device=device),
            requires_grad=False)


def marlin_linear(layer: Int4Linear) -> None:
    """What vLLM's ``MarlinLinearKernel`` does to such a linear, with vLLM's
    own functions: each parameter's ``.data`` set K-first, then to its
    padded repack (the weight: ``gptq_marlin_repack``, its GPU op defined
    by vllm_steer; the scales: permuted by a Python list), which frees the
    checkpoint-format storages while the trace goes on."""
    import vllm._custom_ops as ops
    from vllm.model_executor.layers.quantization.utils import marlin_utils as mu

    n = layer.N
    pn, pk = mu.marlin_padded_nk(n, K5, G5)
    w, s = layer.weight_packed, layer.weight_scale
    w.data = w.data.t()
    w.data = ops.gptq_marlin_repack(mu.marlin_pad_qweight(w.data.contiguous(), n, K5, pn, pk),
                                    size_k=pk, size_n=pn, num_bits=4)
    s.data = s.data.t()
    s.data = mu.marlin_permute_scales(mu.marlin_pad_scales(s.data.contiguous(), n, K5, pn, pk, G5),
                                      size_k=pk, size_n=pn, group_size=G5)


@pytest.mark.parametrize("outputs", [128, 96], ids=["unpadded", "padded"])
def test_a_dense_marlin_linear_whose_storages_are_replaced_is_composed(monkeypatch, outputs):
    import vllm_steer

    vllm_steer._define_marlin_repack()
    monkeypatch.setattr(Int4Linear, "N", outputs)

    def processed5(values):
        return processed(values, marlin_linear, Int4Linear)

    def checkpoint5(seed):
        g = torch.Generator().manual_seed(seed)
        return {"weight_packed": torch.randint(-2**31, 2**31, (outputs, K5 // 8), generator=g,
                                               dtype=torch.int64).to(torch.int32),
                "weight_scale": (torch.rand(outputs, K5 // G5, generator=g) + 0.01).bfloat16()}

    def halves(name, t):
        # As a fused linear's shards arrive: two halves of N.
        return (t[:outputs // 2], t[outputs // 2:])

    live = processed5(checkpoint5(0))
    # Traced again and again: the storages the processing frees must not
    # be taken for traced ones when a new tensor (the scales' index) reuses
    # their address.
    for _ in range(4):
        meta = Int4Linear("meta")
        what = ra.trace(meta, dict(meta.named_parameters()), live, lambda: marlin_linear(meta))
        assert bool(what.zero_places) == (outputs < 128)
        for seed in (1, 2):
            values = checkpoint5(seed)
            _, transformed = written(what, values, processed5(values), halves)
            assert transformed >= 2  # each half through marlin_w4, maybe in parts

"""Loader patterns seen in vLLM models (DESIGN.md's table) and their verdicts.

Each test builds a tiny module with a vLLM-style ``load_weights``, plans it
and checks the kind of every declared name (and the reason of every fallback,
and the boxes where they are fixed), then checks through ``loadplan.verify``
that the plan loads the same bytes as ``load_weights``. A direct name must
stay direct: a plan that falls back everything fails these tests.
"""

from __future__ import annotations

from collections.abc import Callable

import pytest
import torch
from torch import nn

import loadplan
from loadplan import ParamMeta
from loadplan.examples._layers import (
    FusedMoE,
    QKVParallelLinear,
    VocabParallelEmbedding,
    default_weight_loader,
)

BF16 = torch.bfloat16
F32 = torch.float32


def meta(name: str, *shape: int, dtype: torch.dtype = BF16) -> ParamMeta:
    return ParamMeta(name, tuple(shape), dtype)


class Tiny(nn.Module):
    """Parameters (and buffers) filled with ``init``, and one loader per
    checkpoint name: ``loaders[name](module, loaded_weight)``."""

    def __init__(self, params: dict, loaders: dict[str, Callable], *, buffers: dict | None = None,
                 init: float = 0.0):
        super().__init__()
        for name, (shape, dtype) in params.items():
            t = torch.full(shape, init).to(dtype)
            self.register_parameter(name, nn.Parameter(t, requires_grad=False))
        for name, (shape, dtype) in (buffers or {}).items():
            self.register_buffer(name, torch.full(shape, init).to(dtype))
        self.loaders = loaders

    def load_weights(self, weights):
        for name, loaded_weight in weights:
            self.loaders[name](self, loaded_weight)


def norm_boxes(boxes) -> list[tuple[tuple[int, int], ...]]:
    return sorted(tuple(tuple(int(x) for x in d) for d in box) for box in boxes or ())


def coverage(boxes, shape) -> torch.Tensor:
    """Which elements of a checkpoint tensor of ``shape`` the boxes hold."""
    mask = torch.zeros(shape, dtype=torch.int32)
    for box in norm_boxes(boxes):
        mask[tuple(slice(a, b) for a, b in box)] += 1
    return mask


def box_mask(shape, *index) -> torch.Tensor:
    mask = torch.zeros(shape, dtype=torch.int32)
    mask[index] = 1
    return mask


def check(factory: Callable[[], nn.Module], metas: list[ParamMeta], kinds: dict[str, str], *,
          reasons: dict[str, str | tuple[str, ...]] | None = None,
          boxes: dict | None = None, covers: dict | None = None):
    """Plan ``factory()``; every declared name must have the kind in ``kinds``,
    each fallback reason must contain the given substrings, ``boxes`` are
    exact box lists, ``covers`` element masks the boxes must cover exactly
    (each element once). Then ``verify`` must find every byte equal."""
    plan = loadplan.plan_loads(factory(), metas)
    got = {name: entry.kind for name, entry in plan.entries.items()}
    why = {name: entry.reason for name, entry in plan.entries.items() if entry.reason}
    assert got == kinds, f"kinds differ; reasons: {why}"
    for name, subs in (reasons or {}).items():
        for sub in (subs,) if isinstance(subs, str) else subs:
            assert sub in (plan.entries[name].reason or ""), (name, plan.entries[name].reason)
    for name, kind in kinds.items():
        if kind == "direct":
            assert plan.get_boxes(name), name
            assert plan.get_dest(name) is not None, name
        elif kind == "unneeded":
            assert not plan.get_boxes(name), name
        else:
            assert plan.get_dest(name) is None, name
    for name, want in (boxes or {}).items():
        assert norm_boxes(plan.get_boxes(name)) == norm_boxes(want), name
    shapes = {m.name: m.shape for m in metas}
    for name, want in (covers or {}).items():
        assert torch.equal(coverage(plan.get_boxes(name), shapes[name]), want), (
            name, norm_boxes(plan.get_boxes(name)))
    result = loadplan.verify(factory, metas)
    assert result.ok, result
    assert bool(result)
    return plan


def single(param: str, shape, name: str, wshape, fn, *, dtype=BF16, wdtype=None, init=0.0):
    """A module with one parameter and one checkpoint name loaded by
    ``fn(param_data, w)``; returns (factory, metas)."""
    params = {param: (shape, dtype)}

    def factory():
        return Tiny(params, {name: lambda m, w: fn(getattr(m, param).data, w)}, init=init)

    return factory, [meta(name, *wshape, dtype=wdtype or dtype)]


# ------------------------------------------------------------- views fold


def test_narrow():
    f, metas = single("p", (4, 4), "w", (8, 4), lambda p, w: p.copy_(w.narrow(0, 4, 4)))
    check(f, metas, {"w": "direct"}, boxes={"w": [((4, 8), (0, 4))]})


def test_getitem_slice():
    f, metas = single("p", (8, 3), "w", (8, 6), lambda p, w: p.copy_(w[:, 2:5]))
    check(f, metas, {"w": "direct"}, boxes={"w": [((0, 8), (2, 5))]})


def test_select():
    f, metas = single("p", (6,), "w", (3, 6), lambda p, w: p.copy_(w[1]))
    check(f, metas, {"w": "direct"}, boxes={"w": [((1, 2), (0, 6))]})


def test_select_into_expert_slot():
    # FusedMoE-style: param.data[expert_id] is a select on the destination
    f, metas = single("p", (3, 2, 4), "w", (2, 4), lambda p, w: p[2].copy_(w))
    check(f, metas, {"w": "direct"}, boxes={"w": [((0, 2), (0, 4))]})


@pytest.mark.parametrize("how", ["chunk", "split"])
def test_chunk_and_split_into_two_params(how):
    rows = (4, 4) if how == "chunk" else (3, 5)

    def load(m, w):
        a, b = w.chunk(2, dim=0) if how == "chunk" else w.split(list(rows), dim=0)
        m.p0.data.copy_(a)
        m.p1.data.copy_(b)

    def f():
        return Tiny({"p0": ((rows[0], 4), BF16), "p1": ((rows[1], 4), BF16)}, {"w": load})

    check(f, [meta("w", 8, 4)], {"w": "direct"},
          covers={"w": torch.ones(8, 4, dtype=torch.int32)})


def test_unbind():
    def load(m, w):
        for i, row in enumerate(w.unbind(0)):
            getattr(m, f"p{i}").data.copy_(row)

    def f():
        return Tiny({f"p{i}": ((4,), BF16) for i in range(3)}, {"w": load})

    check(f, [meta("w", 3, 4)], {"w": "direct"}, covers={"w": torch.ones(3, 4, dtype=torch.int32)})


def test_unsqueeze_and_squeeze():
    def f():
        return Tiny({"p": ((1, 4, 1), BF16), "q": ((4,), BF16)}, {
            "w": lambda m, w: m.p.data.copy_(w.unsqueeze(0).unsqueeze(-1)),
            "v": lambda m, w: m.q.data.copy_(w.squeeze(0)),
        })

    check(f, [meta("w", 4), meta("v", 1, 4)], {"w": "direct", "v": "direct"},
          boxes={"w": [((0, 4),)], "v": [((0, 1), (0, 4))]})


def test_data_and_detach():
    f, metas = single("p", (4, 4), "w", (4, 4), lambda p, w: p.copy_(w.data.detach()))
    check(f, metas, {"w": "direct"}, boxes={"w": [((0, 4), (0, 4))]})


def test_per_row_loop_merges_into_one_box():
    def load(p, w):
        for i in range(4):
            p[i].copy_(w[i])

    f, metas = single("p", (4, 6), "w", (4, 6), load)
    check(f, metas, {"w": "direct"}, boxes={"w": [((0, 4), (0, 6))]})


def test_setitem_into_slices():
    # MergedReplicatedLinear (DeepSeek's fused_qkv_a_proj): param.data[a:b] = w
    def f():
        return Tiny({"p": ((6, 4), BF16)}, {
            "a": lambda m, w: m.p.data.__setitem__(slice(0, 2), w),
            "b": lambda m, w: m.p.data.__setitem__(slice(2, 6), w),
        })

    check(f, [meta("a", 2, 4), meta("b", 4, 4)], {"a": "direct", "b": "direct"},
          boxes={"a": [((0, 2), (0, 4))], "b": [((0, 4), (0, 4))]})


# ----------------------------------------------- transposes and permutes


def test_transpose_t():
    f, metas = single("p", (6, 4), "w", (4, 6), lambda p, w: p.copy_(w.t()))
    check(f, metas, {"w": "direct"}, boxes={"w": [((0, 4), (0, 6))]})


def test_transpose_contiguous():
    f, metas = single("p", (6, 4), "w", (4, 6),
                      lambda p, w: p.copy_(w.transpose(0, 1).contiguous()))
    check(f, metas, {"w": "direct"}, boxes={"w": [((0, 4), (0, 6))]})


def test_permute():
    f, metas = single("p", (4, 2, 3), "w", (2, 3, 4), lambda p, w: p.copy_(w.permute(2, 0, 1)))
    check(f, metas, {"w": "direct"}, boxes={"w": [((0, 2), (0, 3), (0, 4))]})


def test_gpt_oss_experts_permute_contiguous():
    # gpt-oss: checkpoint experts [E, H, 2I]; this rank (1 of 2) takes its
    # part of 2I and stores [E, 2I/2, H]
    tp_rank, tp_size, e, h, i2 = 1, 2, 2, 4, 8
    part = i2 // tp_size

    def load(p, w):
        narrow = w[:, :, tp_rank * part:(tp_rank + 1) * part]
        p.copy_(narrow.permute(0, 2, 1).contiguous())

    f, metas = single("w13", (e, part, h), "experts.gate_up_proj", (e, h, i2), load)
    check(f, metas, {"experts.gate_up_proj": "direct"},
          boxes={"experts.gate_up_proj": [((0, e), (0, h), (part, i2))]})


@pytest.mark.parametrize("how", ["swapaxes", "swapdims", "transpose_negative"])
def test_swapaxes_and_swapdims_are_transposes(how):
    load = {"swapaxes": lambda p, w: p.copy_(w.swapaxes(0, 1)),
            "swapdims": lambda p, w: p.copy_(w.swapdims(1, 0)),
            "transpose_negative": lambda p, w: p.copy_(w.transpose(-1, -2))}[how]
    f, metas = single("p", (6, 4), "w", (4, 6), load)
    check(f, metas, {"w": "direct"}, boxes={"w": [((0, 4), (0, 6))]})


def test_movedim_is_a_permute():
    f, metas = single("p", (4, 2, 3), "w", (2, 3, 4), lambda p, w: p.copy_(w.movedim(2, 0)))
    check(f, metas, {"w": "direct"}, boxes={"w": [((0, 2), (0, 3), (0, 4))]})


def test_transpose_of_a_1d_tensor_is_the_tensor():
    f, metas = single("p", (4,), "w", (4,), lambda p, w: p.copy_(w.transpose(0, -1)))
    check(f, metas, {"w": "direct"}, boxes={"w": [((0, 4),)]})


# ------------------------------------ views with the layout torch computed


def test_diagonal_is_one_box_per_element():
    f, metas = single("p", (3,), "w", (4, 4), lambda p, w: p.copy_(w.diagonal(1)))
    check(f, metas, {"w": "direct"}, boxes={"w": [((i, i + 1), (i + 1, i + 2)) for i in range(3)]})


def test_unfold_into_whole_windows():
    f, metas = single("p", (3, 2), "w", (6,), lambda p, w: p.copy_(w.unfold(0, 2, 2)))
    check(f, metas, {"w": "direct"}, boxes={"w": [((0, 6),)]})


def test_expand_as_and_view_as():
    def f():
        return Tiny({"p": ((3, 4), BF16), "q": ((2, 6), BF16)}, {
            "row": lambda m, w: m.p.data.copy_(w.expand_as(m.p)),
            "flat": lambda m, w: m.q.data.copy_(w.view_as(m.q)),
        })

    check(f, [meta("row", 1, 4), meta("flat", 12)], {"row": "direct", "flat": "direct"},
          boxes={"row": [((0, 1), (0, 4))], "flat": [((0, 12),)]})


# ------------------------------------------- view / reshape / flatten


def test_view_splits_a_dim():
    f, metas = single("p", (4, 2, 3), "w", (4, 6), lambda p, w: p.copy_(w.view(4, 2, 3)))
    check(f, metas, {"w": "direct"}, boxes={"w": [((0, 4), (0, 6))]})


def test_flatten_and_reshape_merge_dims():
    def f():
        return Tiny({"p": ((6, 4), BF16), "q": ((24,), BF16)}, {
            "w": lambda m, w: m.p.data.copy_(w.flatten(0, 1)),
            "v": lambda m, w: m.q.data.copy_(w.reshape(-1)),
        })

    check(f, [meta("w", 2, 3, 4), meta("v", 2, 3, 4)], {"w": "direct", "v": "direct"},
          boxes={"w": [((0, 2), (0, 3), (0, 4))], "v": [((0, 2), (0, 3), (0, 4))]})


def test_unflatten():
    f, metas = single("p", (2, 4), "w", (8,), lambda p, w: p.copy_(w.unflatten(0, (2, 4))))
    check(f, metas, {"w": "direct"}, boxes={"w": [((0, 8),)]})


def test_flatten_then_slice_whole_rows_is_one_box():
    f, metas = single("p", (8,), "w", (4, 4), lambda p, w: p.copy_(w.reshape(-1)[4:12]))
    check(f, metas, {"w": "direct"}, boxes={"w": [((1, 3), (0, 4))]})


def test_flatten_then_slice_across_rows_is_several_boxes():
    # elements 2..7 of a flattened [4, 4]: the end of row 0 and all of row 1
    f, metas = single("p", (6,), "w", (4, 4), lambda p, w: p.copy_(w.reshape(-1)[2:8]))
    want = torch.zeros(4, 4, dtype=torch.int32)
    want[0, 2:] = 1
    want[1] = 1
    check(f, metas, {"w": "direct"}, covers={"w": want})


# --------------------------------------- same box to several destinations


def test_same_box_to_two_destinations():
    def load(m, w):
        m.p.data.copy_(w)
        m.q.data.copy_(w)

    def f():
        return Tiny({"p": ((4, 4), BF16), "q": ((4, 4), BF16)}, {"w": load})

    check(f, [meta("w", 4, 4)], {"w": "direct"}, boxes={"w": [((0, 4), (0, 4))]})


def test_per_tensor_scale_into_every_slot():
    # QKVParallelLinear.weight_loader_v2 with a scale fused on disk
    def load(p, w):
        for idx in range(p.shape[0]):
            p[idx].copy_(w)

    f, metas = single("weight_scale", (3,), "qkv_proj.weight_scale", (), load, dtype=F32)
    check(f, metas, {"qkv_proj.weight_scale": "direct"})


def test_zero_dim_to_shape_one():
    def f():
        return Tiny({"s": ((1,), F32), "t": ((1,), F32)}, {
            "a": lambda m, w: m.s.data.copy_(w.reshape(1)),  # RowParallelLinear
            "b": lambda m, w: m.t.data.copy_(w),  # BasevLLMParameter._assert_and_load
        })

    check(f, [meta("a", dtype=F32), meta("b", dtype=F32)], {"a": "direct", "b": "direct"})


# ------------------------------------------------------ constant writes


def test_fill_padding():
    # VocabParallelEmbedding: rows it has, then fill_(0) of the padding rows
    def load(p, w):
        p[: w.shape[0]].data.copy_(w)
        p[w.shape[0]:].data.fill_(0)

    f, metas = single("p", (6, 4), "w", (4, 4), load, init=7.0)
    check(f, metas, {"w": "direct"}, boxes={"w": [((0, 4), (0, 4))]})


def test_zero_padding():
    def load(p, w):
        p[:, : w.shape[1]].copy_(w)
        p[:, w.shape[1]:].zero_()

    f, metas = single("p", (4, 8), "w", (4, 5), load, init=3.0)
    check(f, metas, {"w": "direct"}, boxes={"w": [((0, 4), (0, 5))]})


# ---------------------------------------------------------- value reads


def test_item_scalar_loader_falls_back_and_loading_resumes():
    # default_weight_loader for a one-element param: fill_(w.item()); the
    # names after it must still be planned
    def f():
        return Tiny({"k_scale": ((), F32), "p": ((4,), BF16)}, {
            "k_scale": lambda m, w: default_weight_loader(m.k_scale, w),
            "after": lambda m, w: m.p.data.copy_(w),
        }, init=-1.0)

    check(f, [meta("k_scale", dtype=F32), meta("after", 4)],
          {"k_scale": "fallback", "after": "direct"}, reasons={"k_scale": "reads its values"})


def test_keeps_incoming_tensor_across_names_is_an_error():
    def keep(m, w):
        m.kept = w

    def use(m, w):
        m.s.data.fill_(m.kept.item())

    def f():
        return Tiny({"s": ((), F32)}, {"a": keep, "b": use})

    with pytest.raises(RuntimeError):
        loadplan.plan_loads(f(), [meta("a", dtype=F32), meta("b", dtype=F32)])


# ------------------------------------------------------------------ casts


# Conversions are writes that convert (test_conversions.py goes further);
# casts no write does keep their reason.


def test_cast_at_copy():
    f, metas = single("p", (4,), "w", (4,), lambda p, w: p.copy_(w), dtype=F32, wdtype=BF16)
    check(f, metas, {"w": "direct"})


def test_cast_with_to_dtype():
    f, metas = single("p", (4,), "w", (4,), lambda p, w: p.copy_(w.to(F32)), dtype=F32,
                      wdtype=BF16)
    check(f, metas, {"w": "direct"})


def test_cast_bf16_to_fp8():
    fp8 = torch.float8_e4m3fn
    f, metas = single("p", (4, 4), "w", (4, 4), lambda p, w: p.copy_(w), dtype=fp8, wdtype=BF16)
    check(f, metas, {"w": "direct"})


def test_cast_no_write_does():
    f, metas = single("p", (4,), "w", (4,), lambda p, w: p.copy_(w), dtype=torch.float64,
                      wdtype=BF16)
    check(f, metas, {"w": "fallback"},
          reasons={"w": ("casts bfloat16 to float64 at copy_", "send it as float64")})


def test_element_preserving_copies_stay_direct():
    # same-dtype .to(), .to(device) and clone() keep every element
    def f():
        return Tiny({"p": ((4,), BF16), "q": ((4,), BF16), "r": ((4,), BF16)}, {
            "a": lambda m, w: m.p.data.copy_(w.to(BF16, copy=True)),
            "b": lambda m, w: m.q.data.copy_(w.to("cpu", copy=True)),
            "c": lambda m, w: m.r.data.copy_(w.clone()),
        })

    check(f, [meta("a", 4), meta("b", 4), meta("c", 4)],
          {"a": "direct", "b": "direct", "c": "direct"})


# ------------------------------------------------- reads of the destination


def test_composed_loader_reads_destination():
    # vLLM's composed_weight_loader: loader(param, w); param.copy_(fn(param))
    def load(p, w):
        default_weight_loader(p, w)
        p.copy_(p * 2)

    f, metas = single("p", (4, 4), "w", (4, 4), load)
    check(f, metas, {"w": "fallback"}, reasons={"w": "reads the destination"})


def test_check_against_destination():
    def load(p, w):
        p.copy_(w)
        assert torch.isfinite(p).all()

    def f():
        return Tiny({"p": ((4,), F32), "q": ((4,), F32)}, {
            "w": lambda m, w: load(m.p.data, w),
            "v": lambda m, w: m.q.data.copy_(w),
        })

    check(f, [meta("w", 4, dtype=F32), meta("v", 4, dtype=F32)],
          {"w": "fallback", "v": "direct"}, reasons={"w": "reads the destination"})


# --------------------------------- several boxes: steps, expands, broadcasts


def test_step_slice():
    # one box per step
    f, metas = single("p", (4,), "w", (8,), lambda p, w: p.copy_(w[::2]))
    check(f, metas, {"w": "direct"}, boxes={"w": [((i, i + 1),) for i in range(0, 8, 2)]})


def test_step_of_rows_and_columns():
    f, metas = single("p", (2, 6), "w", (4, 6), lambda p, w: p.copy_(w[1::2]))
    check(f, metas, {"w": "direct"}, boxes={"w": [((1, 2), (0, 6)), ((3, 4), (0, 6))]})
    # a step through columns: one box per column, each all rows
    f, metas = single("p", (4, 3), "w", (4, 6), lambda p, w: p.copy_(w[:, ::2]))
    check(f, metas, {"w": "direct"}, boxes={"w": [((0, 4), (j, j + 1)) for j in (0, 2, 4)]})


def test_too_many_steps_fall_back():
    # more than 1024 boxes for one copy
    f, metas = single("p", (2048,), "w", (4096,), lambda p, w: p.copy_(w[::2]))
    check(f, metas, {"w": "fallback"}, reasons={"w": "step"})


def test_expand_copy():
    # every destination row is a copy of w: one write per row, one box
    f, metas = single("p", (3, 4), "w", (4,), lambda p, w: p.copy_(w.expand(3, 4)))
    plan = check(f, metas, {"w": "direct"}, boxes={"w": [((0, 4),)]})
    assert len(plan.entries["w"].writes) == 3


def test_broadcasting_copy():
    f, metas = single("p", (3, 4), "w", (4,), lambda p, w: p.copy_(w))
    plan = check(f, metas, {"w": "direct"}, boxes={"w": [((0, 4),)]})
    assert len(plan.entries["w"].writes) == 3


def test_expand_of_a_column():
    # a [4, 1] column broadcast across 3 columns of a transposed destination
    f, metas = single("p", (3, 4), "w", (4, 1), lambda p, w: p.t().copy_(w.expand(4, 3)))
    check(f, metas, {"w": "direct"}, boxes={"w": [((0, 4), (0, 1))]})


# ---------------------------------------------------------------- overlaps


def test_two_names_write_the_same_g_idx():
    # GPTQ MoE: w1 and w3 both copy their g_idx into the expert's one g_idx
    def f():
        return Tiny({"g_idx": ((8,), torch.int32)}, {
            "w1.g_idx": lambda m, w: m.g_idx.data.copy_(w),
            "w3.g_idx": lambda m, w: m.g_idx.data.copy_(w),
        })

    i32 = torch.int32
    check(f, [meta("w1.g_idx", 8, dtype=i32), meta("w3.g_idx", 8, dtype=i32)],
          {"w1.g_idx": "fallback", "w3.g_idx": "fallback"},
          reasons={"w1.g_idx": "overlap", "w3.g_idx": "overlap"})


def test_partial_overlap_and_adjacent_writes():
    def f():
        return Tiny({"p": ((8, 2), BF16)}, {
            "a": lambda m, w: m.p.data[0:4].copy_(w),
            "b": lambda m, w: m.p.data[2:6].copy_(w),
            "c": lambda m, w: m.p.data[6:8].copy_(w),  # touches b, shares no byte
        })

    check(f, [meta("a", 4, 2), meta("b", 4, 2), meta("c", 2, 2)],
          {"a": "fallback", "b": "fallback", "c": "direct"},
          reasons={"a": "overlap", "b": "overlap"})


# -------------------------------------------- ops that are not copies


def test_in_place_op_on_incoming_tensor():
    def load(p, w):
        w.mul_(2)
        p.copy_(w)

    f, metas = single("p", (4,), "w", (4,), load)
    check(f, metas, {"w": "fallback"}, reasons={"w": "applies"})


def test_arithmetic_on_incoming_tensor():
    f, metas = single("p", (4,), "w", (4,), lambda p, w: p.copy_(w * 2))
    check(f, metas, {"w": "fallback"}, reasons={"w": "applies"})


def test_write_without_copy():
    f, metas = single("p", (4,), "w", (4,), lambda p, w: p.add_(w))
    check(f, metas, {"w": "fallback"}, reasons={"w": "without Tensor.copy_"})


def test_copy_into_a_tensor_that_is_not_a_target():
    class Mirror(Tiny):
        def __init__(self):
            super().__init__({"p": ((4,), BF16)}, {
                "w": lambda m, w: m.mirror.copy_(w),
                "v": lambda m, w: m.p.data.copy_(w),
            })
            self.mirror = torch.zeros(4, dtype=BF16)  # plain attribute: no target

    check(Mirror, [meta("w", 4), meta("v", 4)], {"w": "fallback", "v": "direct"},
          reasons={"w": "not a checkpoint tensor"})


def test_buffer_is_a_target():
    def f():
        return Tiny({}, {"w": lambda m, w: m.running.copy_(w)}, buffers={"running": ((4,), F32)})

    check(f, [meta("w", 4, dtype=F32)], {"w": "direct"}, boxes={"w": [((0, 4),)]})


def test_name_the_loader_skips_is_unneeded():
    def f():
        return Tiny({"p": ((4,), BF16)}, {
            "rotary_emb.inv_freq": lambda m, w: None,
            "w": lambda m, w: m.p.data.copy_(w),
        })

    check(f, [meta("rotary_emb.inv_freq", 2, dtype=F32), meta("w", 4)],
          {"rotary_emb.inv_freq": "unneeded", "w": "direct"})


# --------------------------------------------------------------- errors


def test_lonely_fallback_combining_names_is_an_error():
    # a loader that stitches two checkpoint tensors together: the second name
    # falls back but writes nothing itself
    def keep(m, w):
        m.parts = [w]

    def combine(m, w):
        m.p.data.copy_(torch.cat(m.parts + [w]))

    def f():
        return Tiny({"p": ((8,), BF16)}, {"first_half": keep, "second_half": combine})

    with pytest.raises(RuntimeError):
        loadplan.plan_loads(f(), [meta("first_half", 4), meta("second_half", 4)])


def test_lonely_fallback_that_writes_nothing_is_an_error():
    def stash(m, w):
        m.scaled = w * 2  # computed, kept for later, never copied into a target

    def f():
        return Tiny({"p": ((4,), BF16)}, {"w_scaled": stash, "v": lambda m, w: m.p.data.copy_(w)})

    with pytest.raises(RuntimeError, match="w_scaled"):
        loadplan.plan_loads(f(), [meta("w_scaled", 4), meta("v", 4)])


def test_trace_used_after_planning_is_an_error():
    # a loader that keeps the incoming tensor on the module: a later use of
    # it would go nowhere
    def keep(m, w):
        m.kept = w
        m.p.data.copy_(w)

    model = Tiny({"p": ((4,), BF16)}, {"w": keep})
    loadplan.plan_loads(model, [meta("w", 4)])
    with pytest.raises(RuntimeError):
        model.kept * 2


def test_name_declared_twice_is_an_error():
    f, metas = single("p", (4,), "w", (4,), lambda p, w: p.copy_(w))
    with pytest.raises(ValueError, match="w"):
        loadplan.plan_loads(f(), metas + metas)


# ------------------------------------------- vLLM layers: heads, experts


class QKV(nn.Module):
    """A QKVParallelLinear for one rank; names q/k/v or a fused-on-disk qkv."""

    def __init__(self, tp_rank: int, tp_size: int, heads: int = 4, kv_heads: int = 2,
                 head_dim: int = 2, hidden: int = 4, permute: bool = False):
        super().__init__()
        self.qkv_proj = QKVParallelLinear(hidden, head_dim, heads, kv_heads, params_dtype=BF16,
                                          quant_config=None, tp_rank=tp_rank, tp_size=tp_size)
        self.heads, self.kv_heads, self.head_dim, self.permute = heads, kv_heads, head_dim, permute

    def _permute(self, w: torch.Tensor, n_heads: int) -> torch.Tensor:
        # Mistral / Llama consolidated checkpoints: undo the rotary interleave
        attn_in, attn_out = self.head_dim * n_heads, w.shape[1]
        return (w.view(n_heads, attn_in // n_heads // 2, 2, attn_out)
                .transpose(1, 2).reshape(attn_in, attn_out))

    def load_weights(self, weights):
        param = self.qkv_proj.weight
        for name, w in weights:
            shard_id = {"q_proj": "q", "k_proj": "k", "v_proj": "v", "qkv_proj": None}[name]
            if self.permute and name == "q_proj":
                w = self._permute(w, self.heads)
            elif self.permute and name == "k_proj":
                w = self._permute(w, self.kv_heads)
            param.weight_loader(param, w, shard_id)


def qkv_metas(heads=4, kv_heads=2, head_dim=2, hidden=4) -> list[ParamMeta]:
    return [meta("q_proj", heads * head_dim, hidden), meta("k_proj", kv_heads * head_dim, hidden),
            meta("v_proj", kv_heads * head_dim, hidden)]


class FusedQKV(nn.Module):
    """A fused-on-disk ``query_key_value`` (weight and bias) loaded into a
    QKVParallelLinear through a loader that reorders it first, as Bloom's
    and Falcon's do."""

    def __init__(self, tp_rank: int, tp_size: int, layout: str, heads: int = 4,
                 kv_heads: int = 4, head_dim: int = 2, hidden: int = 8):
        super().__init__()
        self.query_key_value = QKVParallelLinear(
            hidden, head_dim, heads, kv_heads, bias=True, params_dtype=BF16,
            quant_config=None, tp_rank=tp_rank, tp_size=tp_size)
        self.layout, self.heads, self.kv_heads = layout, heads, kv_heads

    def _bloom(self, w: torch.Tensor) -> torch.Tensor:
        # on disk (heads, 3, head_dim): a reshape torch must copy
        shape = w.shape
        return w.view((self.heads, 3, -1) + shape[1:]).transpose(0, 1).reshape(shape)

    def _falcon(self, w: torch.Tensor) -> torch.Tensor:
        # on disk (kv heads, q heads per kv head + 2, head_dim): q, k, v cut
        # out of each kv group and concatenated
        shape, per_kv = w.shape, self.heads // self.kv_heads
        w = w.view((self.kv_heads, per_kv + 2, -1) + shape[1:])
        wq = w.narrow(1, 0, per_kv).reshape(-1, *shape[1:])
        wk = w.narrow(1, per_kv, 1).reshape(-1, *shape[1:])
        wv = w.narrow(1, per_kv + 1, 1).reshape(-1, *shape[1:])
        return torch.cat([wq, wk, wv], dim=0)

    def load_weights(self, weights):
        for name, w in weights:
            param = getattr(self.query_key_value, name.rsplit(".", 1)[1])
            w = self._bloom(w) if self.layout == "bloom" else self._falcon(w)
            param.weight_loader(param, w)


def fused_qkv_metas(rows: int, hidden: int = 8) -> list[ParamMeta]:
    return [meta("query_key_value.weight", rows, hidden), meta("query_key_value.bias", rows)]


@pytest.mark.parametrize("tp_rank,tp_size", [(0, 1), (0, 2), (1, 2)])
def test_bloom_fused_qkv_is_one_box_per_head(tp_rank, tp_size):
    # 4 heads of 2 rows, q/k/v interleaved per head on disk: this rank's
    # q (k, v) rows of each of its heads are one box
    names = ("query_key_value.weight", "query_key_value.bias")
    plan = check(lambda: FusedQKV(tp_rank, tp_size, "bloom"), fused_qkv_metas(24),
                 dict.fromkeys(names, "direct"))
    heads = range(tp_rank * 4 // tp_size, (tp_rank + 1) * 4 // tp_size)
    rows = sorted((6 * h + 2 * i, 6 * h + 2 * i + 2) for h in heads for i in range(3))
    assert norm_boxes(plan.get_boxes(names[0])) == [(r, (0, 8)) for r in rows]
    assert norm_boxes(plan.get_boxes(names[1])) == [(r,) for r in rows]


@pytest.mark.parametrize("kv_heads", [4, 2, 1])
@pytest.mark.parametrize("tp_rank,tp_size", [(0, 1), (0, 2), (1, 2)])
def test_falcon_fused_qkv_concatenation_is_direct(tp_rank, tp_size, kv_heads):
    # q, k and v cut out of each kv group and concatenated: a copy of each
    # piece; 4 heads of 2 rows, multi-query (1 kv head) included
    rows = (4 + 2 * kv_heads) * 2
    names = ("query_key_value.weight", "query_key_value.bias")
    check(lambda: FusedQKV(tp_rank, tp_size, "falcon", kv_heads=kv_heads),
          fused_qkv_metas(rows), dict.fromkeys(names, "direct"))


def test_cat_with_a_real_tensor_falls_back():
    # not a rearrangement of the incoming tensor alone
    f, metas = single("p", (8,), "w", (4,),
                      lambda p, w: p.copy_(torch.cat([w, torch.zeros(4, dtype=BF16)])))
    check(f, metas, {"w": "fallback"}, reasons={"w": "aten.cat"})


def test_stack_of_rows():
    f, metas = single("p", (4, 2), "w", (4, 4),
                      lambda p, w: p.copy_(torch.stack([w[0], w[3]], dim=1)))
    check(f, metas, {"w": "direct"}, boxes={"w": [((0, 1), (0, 4)), ((3, 4), (0, 4))]})


@pytest.mark.parametrize("tp_rank", range(4))
def test_kv_head_replication_across_ranks(tp_rank):
    # 2 KV heads on 4 ranks: ranks 0, 1 hold head 0 and ranks 2, 3 head 1
    kv_head = tp_rank // 2
    check(lambda: QKV(tp_rank, 4), qkv_metas(),
          {"q_proj": "direct", "k_proj": "direct", "v_proj": "direct"},
          boxes={"q_proj": [((2 * tp_rank, 2 * tp_rank + 2), (0, 4))],
                 "k_proj": [((2 * kv_head, 2 * kv_head + 2), (0, 4))],
                 "v_proj": [((2 * kv_head, 2 * kv_head + 2), (0, 4))]})


def test_kv_head_replicated_within_a_rank():
    # one KV head copied to every query-head group of this rank
    def load(p, w):
        head = w[2:4]
        for group in range(3):
            p[2 * group:2 * group + 2].copy_(head)

    f, metas = single("k_rep", (6, 4), "k_proj", (4, 4), load)
    check(f, metas, {"k_proj": "direct"}, boxes={"k_proj": [((2, 4), (0, 4))]})


def test_fused_on_disk_qkv_is_one_name_with_several_boxes():
    tp_rank = 1
    plan = check(lambda: QKV(tp_rank, 2), [meta("qkv_proj", 16, 4)], {"qkv_proj": "direct"},
                 covers={"qkv_proj": sum((box_mask((16, 4), slice(a, b))
                                          for a, b in ((4, 8), (10, 12), (14, 16))),
                                         torch.zeros(16, 4, dtype=torch.int32))})
    assert len(plan.get_boxes("qkv_proj")) == 3


@pytest.mark.parametrize("tp_rank", range(2))
def test_mistral_qk_permute(tp_rank):
    # view -> transpose -> reshape of the incoming q/k, then the TP narrow
    heads, kv_heads, head_dim, hidden = 4, 2, 4, 4
    q_rows, kv_rows = heads * head_dim // 2, kv_heads * head_dim // 2
    check(lambda: QKV(tp_rank, 2, heads, kv_heads, head_dim, hidden, permute=True),
          qkv_metas(heads, kv_heads, head_dim, hidden),
          {"q_proj": "direct", "k_proj": "direct", "v_proj": "direct"},
          covers={"q_proj": box_mask((16, 4), slice(q_rows * tp_rank, q_rows * (tp_rank + 1))),
                  "k_proj": box_mask((8, 4), slice(kv_rows * tp_rank, kv_rows * (tp_rank + 1))),
                  "v_proj": box_mask((8, 4), slice(kv_rows * tp_rank, kv_rows * (tp_rank + 1)))})


class Experts(nn.Module):
    """FusedMoE with checkpoint names experts.{e}.{gate,up,down}_proj.weight."""

    def __init__(self, tp_rank: int, tp_size: int, enable_ep: bool, num_experts: int = 4):
        super().__init__()
        self.num_experts = num_experts
        self.experts = FusedMoE(num_experts, 2, 4, 4, params_dtype=BF16, tp_rank=tp_rank,
                                tp_size=tp_size, enable_ep=enable_ep)

    def load_weights(self, weights):
        mapping = FusedMoE.make_expert_params_mapping("gate_proj", "down_proj", "up_proj",
                                                      self.num_experts)
        params = dict(self.named_parameters())
        for name, w in weights:
            for param_name, weight_name, expert_id, shard_id in mapping:
                if weight_name in name:
                    name = name.replace(weight_name, param_name)
                    param = params[name]
                    param.weight_loader(param, w, name, shard_id=shard_id, expert_id=expert_id)
                    break


def expert_metas(num_experts: int = 4) -> list[ParamMeta]:
    return [meta(f"experts.{e}.{p}.weight", *((4, 4))) for e in range(num_experts)
            for p in ("gate_proj", "up_proj", "down_proj")]


@pytest.mark.parametrize("tp_rank", range(2))
def test_experts_of_other_ranks_are_unneeded(tp_rank):
    # expert parallelism over 2 ranks: experts 0, 1 on rank 0 and 2, 3 on rank 1
    mine = {2 * tp_rank, 2 * tp_rank + 1}
    kinds = {m.name: "direct" if int(m.name.split(".")[1]) in mine else "unneeded"
             for m in expert_metas()}
    check(lambda: Experts(tp_rank, 2, enable_ep=True), expert_metas(), kinds,
          boxes={m.name: [((0, 4), (0, 4))] for m in expert_metas()
                 if kinds[m.name] == "direct"})


@pytest.mark.parametrize("tp_rank", range(2))
def test_experts_split_by_tensor_parallelism(tp_rank):
    rows = (2 * tp_rank, 2 * tp_rank + 2)
    boxes = {}
    for m in expert_metas():
        down = m.name.endswith("down_proj.weight")
        boxes[m.name] = [((0, 4), rows)] if down else [(rows, (0, 4))]
    check(lambda: Experts(tp_rank, 2, enable_ep=False), expert_metas(),
          {m.name: "direct" for m in expert_metas()}, boxes=boxes)


def test_redundant_experts_one_checkpoint_expert_into_two_slots():
    # EPLB-style: 3 logical experts in 4 physical slots, slot 3 replicates 0
    physical_to_logical = [0, 1, 2, 0]

    def load(m, name, w):
        logical = int(name.split(".")[1])
        for slot, expert in enumerate(physical_to_logical):
            if expert == logical:
                m.w2_weight.data[slot].copy_(w)

    class Redundant(nn.Module):
        def __init__(self):
            super().__init__()
            self.w2_weight = nn.Parameter(torch.zeros(4, 4, 2, dtype=BF16), requires_grad=False)

        def load_weights(self, weights):
            for name, w in weights:
                load(self, name, w)

    metas = [meta(f"experts.{e}.down_proj.weight", 4, 2) for e in range(3)]
    check(Redundant, metas, {m.name: "direct" for m in metas},
          boxes={m.name: [((0, 4), (0, 2))] for m in metas})


def test_fused_experts_on_disk_full_load():
    # a 3-D checkpoint tensor holds every expert: FusedMoE's full_load path
    class Full(Experts):
        def load_weights(self, weights):
            for name, w in weights:
                param = self.experts.w13_weight
                shard_id = "w1" if "gate" in name else "w3"
                self.experts.weight_loader(param, w, "experts.w13_weight", shard_id, 0)

    metas = [meta("experts.gate_proj", 4, 4, 4), meta("experts.up_proj", 4, 4, 4)]
    check(lambda: Full(1, 2, enable_ep=False), metas, {m.name: "direct" for m in metas},
          boxes={m.name: [((0, 4), (2, 4), (0, 4))] for m in metas})


# ------------------------------------------------ vocab padding over ranks


class Embedding(nn.Module):
    def __init__(self, vocab: int, tp_rank: int, tp_size: int):
        super().__init__()
        self.embed_tokens = VocabParallelEmbedding(vocab, 4, params_dtype=BF16, tp_rank=tp_rank,
                                                   tp_size=tp_size, padding_size=64)
        self.embed_tokens.weight.data.fill_(5)  # the loader must zero the padding

    def load_weights(self, weights):
        for _, w in weights:
            p = self.embed_tokens.weight
            p.weight_loader(p, w)


def test_vocab_padding_is_filled():
    # vocab 100 padded to 128 over 4 ranks: rank 3 holds rows 96..99 + padding
    check(lambda: Embedding(100, 3, 4), [meta("embed_tokens.weight", 100, 4)],
          {"embed_tokens.weight": "direct"}, boxes={"embed_tokens.weight": [((96, 100), (0, 4))]})


def test_rank_holding_only_padding_needs_nothing():
    # vocab 40 padded to 64 over 4 ranks: rank 3's 16 rows are all padding
    check(lambda: Embedding(40, 3, 4), [meta("embed_tokens.weight", 40, 4)],
          {"embed_tokens.weight": "unneeded"})

"""Copies through a transform, from the capture to the plan: a Redirect
whose remap writes a region through ``marlin_w4`` (an engine's processing
that repacks a pack-quantized weight for Marlin) makes the loader's copy a
transforming copy record, which the compiler reduces to a transforming
write where the copied value is a row-major box of the checkpoint tensor.
Every plan here is also compiled from the capture's IR text and compared
(conftest.py)."""

from __future__ import annotations

import pytest
import torch

import loadplan
from loadplan import ParamMeta, _ir, _native
from loadplan.apply import load_planned
from loadplan.capture import Redirect, Targets, capture, storage_key
from loadplan.planning import compile_capture, compile_ir
from loadplan.vllm.kernel_refs import marlin_w4_transform

I32 = torch.int32
ROWS, COLS = 32, 8  # the layer's checkpoint-format tensor: [N rows, K / 8 words]
# Marlin's words of it: [COLS / 2 atom columns, ROWS / 16 atom rows, 32 words].
MARLIN = (COLS // 2, ROWS // 16, 32)
MARLIN_STRIDE = (ROWS // 16 * 32, 32, 1)
NOT_A_BOX = ("copies through transform marlin_w4 a view that is not a row-major box of a "
             "2-d checkpoint tensor")


class Layer(torch.nn.Module):
    def __init__(self, experts: int):
        super().__init__()
        # The live tensor, which the engine's processing fills with the
        # Marlin words of the checkpoint-format one (``packed``, a stand-in
        # while the loader is traced).
        self.register_buffer("marlin", torch.full((experts, *MARLIN), 7, dtype=I32))


class Model(torch.nn.Module):
    def __init__(self, load, experts: int = 1):
        super().__init__()
        self.layer = Layer(experts)
        self._load = load

    def load_weights(self, weights):
        for name, w in weights:
            self._load(self.layer.packed, name, w)


def whole_experts(target):
    """A remap: a copy of one whole expert goes through ``marlin_w4`` into
    that expert's words."""
    def remap(offset, shape, stride):
        if offset % (ROWS * COLS) or tuple(shape) != (ROWS, COLS) or tuple(stride) != (COLS, 1):
            return "a copy of part of an expert"
        return [(target, offset, MARLIN, MARLIN_STRIDE, "marlin_w4")]

    return remap


def redirected(load, experts: int = 1, remap=whole_experts):
    """A model whose loader copies into ``layer.packed`` ([experts, ROWS,
    COLS] on meta), with the Redirect of it into ``layer.marlin`` by
    ``remap(target)``."""
    model = Model(load, experts)
    targets = Targets(model)
    [target] = [t for t in targets.targets if t.qualified_name == "layer.marlin"]
    remap = remap(target)
    packed = torch.empty(experts, ROWS, COLS, dtype=I32, device="meta")
    model.layer.packed = packed
    redirects = {storage_key(packed): Redirect("layer", "packed", I32, remap)}
    return model, targets, redirects


def plan_redirected(load, metas, experts: int = 1, remap=whole_experts):
    model, targets, redirects = redirected(load, experts, remap)
    return model, loadplan.plan_loads(model, metas, targets=targets, redirects=redirects)


def test_a_copy_through_a_transform_is_a_transforming_write_of_its_box():
    """A TP shard's rows of the checkpoint tensor: the write's box is those
    rows, its region the words the remap gave, and the runtime writes the
    Marlin words of the shard there."""
    def load(packed, name, w):
        packed[0].copy_(w.narrow(0, ROWS, ROWS))  # rank 1 of 2

    model, plan = plan_redirected(load, [ParamMeta("w", (2 * ROWS, COLS), I32)])
    entry = plan.entries["w"]
    assert entry.kind == "direct", entry.reason
    [write] = entry.writes
    assert write.transform == "marlin_w4"
    assert write.target == "layer.marlin"
    assert tuple(map(tuple, write.box)) == ((ROWS, 2 * ROWS), (0, COLS))
    assert (write.offset, write.shape, write.stride) == (0, MARLIN, MARLIN_STRIDE)
    # The copy is recorded of the narrowed trace as it is, its destination
    # the transform's output.
    assert (f'as i32 transform "marlin_w4" : tensor<{ROWS}x{COLS}xi32>') in plan.ir
    g = torch.Generator().manual_seed(5)
    w = torch.randint(-2**31, 2**31 - 1, (2 * ROWS, COLS), generator=g, dtype=I32)
    load_planned(model, plan, [("w", w)])
    assert torch.equal(model.layer.marlin[0], marlin_w4_transform(w[ROWS:]))


def test_parts_of_a_copy_through_a_transform_are_writes_of_their_boxes():
    """A remap may give a region per part of the copied region (a box of
    it, per dim): here each atom row of an expert, copied as a [1, ROWS,
    COLS] slice. Each part is its 2-d matrix through the transform."""
    def remap(target):
        def parts(offset, shape, stride):
            assert tuple(shape) == (1, ROWS, COLS)
            return [(target, offset + 32 * q, (COLS // 2, 1, 32), MARLIN_STRIDE,
                     ("marlin_w4", ((0, 1), (16 * q, 16 * q + 16), (0, COLS))))
                    for q in range(ROWS // 16)]
        return parts

    def load(packed, name, w):
        packed[0:1].copy_(w.unsqueeze(0))

    model, plan = plan_redirected(load, [ParamMeta("w", (ROWS, COLS), I32)], remap=remap)
    entry = plan.entries["w"]
    assert entry.kind == "direct", entry.reason
    assert [(tuple(map(tuple, w.box)), w.offset, w.transform) for w in entry.writes] == [
        (((16 * q, 16 * q + 16), (0, COLS)), 32 * q, "marlin_w4") for q in range(ROWS // 16)]
    g = torch.Generator().manual_seed(6)
    w = torch.randint(-2**31, 2**31 - 1, (ROWS, COLS), generator=g, dtype=I32)
    load_planned(model, plan, [("w", w)])
    assert torch.equal(model.layer.marlin[0], marlin_w4_transform(w))


def test_a_transposed_copy_through_a_transform_falls_back():
    """The source is a box, but its rows are the checkpoint's columns: the
    compiler refuses it, from records and from text alike."""
    def load(packed, name, w):
        packed[0].copy_(w.t())

    _, plan = plan_redirected(load, [ParamMeta("t", (COLS, ROWS), I32)])
    assert plan.entries["t"].kind == "fallback"
    assert plan.entries["t"].reason == NOT_A_BOX


def test_a_constant_through_a_transform_falls_back_and_writes_nothing():
    def load(packed, name, w):
        w.zero_()
        packed[0].copy_(w)

    model, plan = plan_redirected(load, [ParamMeta("z", (ROWS, COLS), I32)])
    entry = plan.entries["z"]
    assert entry.kind == "fallback"
    assert entry.reason == ("vLLM rearranges layer after loading, and a write of it does not "
                            "follow: a constant written through transform marlin_w4 is not "
                            "supported")
    assert (model.layer.marlin == 7).all()  # nothing was filled while planning


def test_a_copy_that_converts_into_a_transform_falls_back():
    def load(packed, name, w):
        packed[0].copy_(w)  # float32 into int32: copy_ converts

    _, plan = plan_redirected(load, [ParamMeta("f", (ROWS, COLS), torch.float32)])
    entry = plan.entries["f"]
    assert entry.kind == "fallback"
    assert "is not whole atoms of transform marlin_w4 (16 x 2 int32" in entry.reason


def test_experts_through_a_transform_compile_as_members_of_one_checkpoint():
    """Each expert's copy differs only in where it goes: they are members of
    one checkpoint, with the transform in their key, and compile to the plan
    of the text."""
    experts = 4

    def load(packed, name, w):
        packed[int(name.split(".")[1])].copy_(w)

    metas = [ParamMeta(f"experts.{e}.w", (ROWS, COLS), I32) for e in range(experts)]
    model, targets, redirects = redirected(load, experts)
    captured = capture(model, metas, targets=targets, redirects=redirects)
    out = compile_capture(captured, print_ir=True)
    head = next(line for line in out["ir"].splitlines() if '"experts.0.w"' in line)
    shift = ROWS * COLS * 4
    assert (f'members ["experts.1.w" at 1 moved {shift}, "experts.2.w" at 2 moved {2 * shift}, '
            f'"experts.3.w" at 3 moved {3 * shift}]') in head, head
    assert 'transform "marlin_w4"' in out["ir"]
    assert out["plan"] == compile_ir(captured.ir)["plan"]
    plan = _native.Plan.from_bytes(out["plan"])
    assert list(plan.names()) == [m.name for m in metas]
    assert '"transform": "marlin_w4"' in out["json"]


def test_a_copy_record_with_an_unknown_transform_code_is_refused():
    def load(packed, name, w):
        packed[0].copy_(w)

    model, targets, redirects = redirected(load)
    captured = capture(model, [ParamMeta("w", (ROWS, COLS), I32)], targets=targets,
                       redirects=redirects)
    declarations, types, strings, [(name, type_, ops)] = captured.records()
    [copy] = ops
    assert copy[0] == _ir.COPY and copy[-1] == _ir.TRANSFORMS["marlin_w4"][0]
    with pytest.raises(_native.CompileError, match="records: no transform of code 99"):
        _native.compile_records(declarations, types, strings,
                                [(name, type_, [copy[:-1] + (99,)])])

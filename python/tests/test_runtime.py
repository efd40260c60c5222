"""load_planned through the runtime, LoadPlan.save/load, and the runtime
binding (loadplan._runtime): byte equality with load_weights, one runtime
call per batch, all-or-nothing batches, fingerprint refusals, threads."""

from __future__ import annotations

import json
import logging

import pytest
import torch

import loadplan
from loadplan import LoadPlan, ParamMeta, _runtime
from loadplan.cli import main
from loadplan.examples import deepseek_mla, fp8, llama, qwen2_moe

BF16, F32 = torch.bfloat16, torch.float32
EXAMPLES = {"llama": llama, "qwen2_moe": qwen2_moe, "deepseek_mla": deepseek_mla, "fp8": fp8}


def state_bytes(model: torch.nn.Module) -> dict[str, torch.Tensor]:
    """Every parameter and buffer as raw bytes (NaNs compare too)."""
    tensors = dict(model.named_parameters())
    tensors.update(dict(model.named_buffers()))
    return {n: t.detach().reshape(-1).view(torch.uint8).clone() for n, t in tensors.items()}


def same_bytes(a: torch.nn.Module, b: torch.nn.Module) -> None:
    sa, sb = state_bytes(a), state_bytes(b)
    assert sa.keys() == sb.keys()
    for name in sa:
        assert torch.equal(sa[name], sb[name]), name


class CountingBinding:
    """Stands in for loadplan._native.Binding and counts its applies."""

    def __init__(self, inner):
        self.inner = inner
        self.calls: list[list[str]] = []

    def apply_tensors(self, tensors, stream=0):
        self.calls.append([t[0] for t in tensors])
        self.inner.apply_tensors(tensors, stream)

    def apply_checked(self, stream=0):  # the same runtime call, checked in one go
        self.calls.append(self.inner.pending_names())
        self.inner.apply_checked(stream)

    def __getattr__(self, name):
        return getattr(self.inner, name)


# ---------------------------------------------------------------------------
# load_planned through the runtime


@pytest.mark.parametrize("example", sorted(EXAMPLES))
@pytest.mark.parametrize("rank", [0, 1])
def test_verify_through_the_runtime_on_the_examples(example, rank):
    module = EXAMPLES[example]
    _, metas = module.make(tp_rank=rank, tp_size=2)
    result = loadplan.verify(lambda: module.make(tp_rank=rank, tp_size=2)[0], metas)
    assert result, str(result)
    binding = result.plan.binding
    assert binding is not None and binding.device.type == "cpu"


def test_one_runtime_call_per_batch_and_fallbacks_to_the_loader_in_order():
    model, metas = fp8.make(tp_rank=1, tp_size=2)
    plan = loadplan.plan_loads(model, metas)
    binding = plan.bind()
    counting = binding._native = CountingBinding(binding._native)
    handed = []
    load_weights = model.load_weights
    model.load_weights = lambda ws: (handed.append([n for n, _ in ws]), load_weights(ws))
    weights = loadplan.random_weights(metas, seed=1)
    loadplan.load_planned(model, plan, weights)
    kinds = {n: plan.entries[n].kind for n, _ in weights}
    assert counting.calls == [[n for n, _ in weights if kinds[n] == "direct"]]
    assert handed == [[n for n, _ in weights if kinds[n] == "fallback"]]
    assert handed[0]
    # The bf16-sent fp8 weight converts in the same runtime call.
    down = "model.layers.0.mlp.down_proj.weight"
    assert down in counting.calls[0]
    assert plan.entries[down].writes[0].convert_to == torch.float8_e4m3fn


def test_incoming_tensors_that_are_not_contiguous_are_copied_right():
    model, metas = llama.make(tp_rank=0, tp_size=2)
    plan = loadplan.plan_loads(model, metas)
    weights = loadplan.random_weights(metas, seed=2)
    # The same values, laid out transposed in memory.
    strided = [(n, t.t().contiguous().t() if t.dim() == 2 else t) for n, t in weights]
    assert not strided[1][1].is_contiguous()
    loadplan.load_planned(model, plan, strided)
    want, _ = llama.make(tp_rank=0, tp_size=2)
    loadplan.plan_loads(want, metas)  # the same constant writes
    with torch.no_grad():
        want.load_weights(weights)
    same_bytes(model, want)


@pytest.mark.parametrize(
    "bad, error",
    [
        (lambda w: w.to(F32), "is torch.float32"),
        (lambda w: w[:-1], "declared torch.bfloat16"),
        (lambda w: w, "sent twice"),
    ],
)
def test_a_batch_with_one_bad_tensor_writes_nothing(bad, error):
    model, metas = llama.make(tp_rank=0, tp_size=2, num_layers=2)
    plan = loadplan.plan_loads(model, metas)
    before = state_bytes(model)
    weights = loadplan.random_weights(metas, seed=3)
    name, w = weights[-3]
    with pytest.raises(ValueError, match=error):
        loadplan.load_planned(model, plan, weights + [(name, bad(w))])
    assert all(torch.equal(before[n], t) for n, t in state_bytes(model).items())


class _ClaimsAnotherShape(torch.Tensor):
    """A tensor subclass whose class redefines ``shape``."""

    @property
    def shape(self):
        return torch.Size([1, *super().shape])


def test_a_tensor_subclass_is_read_through_its_own_properties():
    model, metas = llama.make(tp_rank=0, tp_size=2, num_layers=2)
    plan = loadplan.plan_loads(model, metas)
    weights = loadplan.random_weights(metas, seed=4)
    loadplan.load_planned(model, plan, weights)  # the fast path, bound
    before = state_bytes(model)
    name, w = weights[-3]
    odd = weights[:-3] + [(name, w.as_subclass(_ClaimsAnotherShape))] + weights[-2:]
    # The update's check reads the subclass's `shape`, as Python would.
    with pytest.raises(ValueError, match="declared torch.bfloat16"):
        loadplan.load_planned(model, plan, odd)
    assert all(torch.equal(before[n], t) for n, t in state_bytes(model).items())
    # Plain tensors again after it.
    loadplan.load_planned(model, plan, loadplan.random_weights(metas, seed=5))
    want, _ = llama.make(tp_rank=0, tp_size=2, num_layers=2)
    loadplan.plan_loads(want, metas)
    with torch.no_grad():
        want.load_weights(loadplan.random_weights(metas, seed=5))
    same_bytes(model, want)


def test_the_runtime_refuses_a_bad_batch_whole_and_writes_nothing():
    model, metas = llama.make(tp_rank=0, tp_size=2, num_layers=2)
    plan = loadplan.plan_loads(model, metas)
    binding = plan.bind()
    before = state_bytes(model)
    weights = dict(loadplan.random_weights(metas, seed=4))
    good = [(n, weights[n]) for n in ("model.embed_tokens.weight", "model.layers.0.self_attn.q_proj.weight")]
    cases = [
        ("model.layers.0.mlp.down_proj.weight", torch.zeros(3, 3, dtype=BF16), "has shape"),
        ("model.layers.0.mlp.down_proj.weight", weights["model.layers.0.mlp.down_proj.weight"].float(),
         "dtype"),
        ("lm_head.weight", weights["lm_head.weight"], "not needed on this rank"),
        ("model.layers.0.self_attn.q_proj.weight", weights["model.layers.0.self_attn.q_proj.weight"],
         "sent twice"),
        ("nope", torch.zeros(1), "no such name"),
    ]
    for name, tensor, error in cases:
        with pytest.raises(_runtime.InvalidUpdate, match=error) as info:
            binding.apply_tensors(good + [(name, tensor)])
        assert isinstance(info.value, ValueError) and info.value.code_name == "invalid_update"
        assert all(torch.equal(before[n], t) for n, t in state_bytes(model).items())


def test_boxes_through_the_binding_equal_full_tensors():
    """The packed-box form a sliced transfer receives."""
    metas = llama.make(tp_rank=1, tp_size=2)[1]
    weights = loadplan.random_weights(metas, seed=5)
    by_tensors, _ = llama.make(tp_rank=1, tp_size=2)
    plan = loadplan.plan_loads(by_tensors, metas)
    loadplan.load_planned(by_tensors, plan, weights)

    by_boxes, _ = llama.make(tp_rank=1, tp_size=2)
    box_plan = loadplan.plan_loads(by_boxes, metas)
    boxes = []
    for name, full in weights:
        if box_plan.entries[name].kind == "direct":
            for box in box_plan.get_boxes(name):
                boxes.append((name, box, full[tuple(slice(a, b) for a, b in box)]))
    box_plan.bind().apply_boxes(boxes)
    same_bytes(by_tensors, by_boxes)

    name, box, part = boxes[0]
    with pytest.raises(_runtime.InvalidUpdate, match="elements"):
        box_plan.binding.apply_boxes([(name, box, part[:1])])


def test_a_box_batch_needs_every_box_of_a_name(loader_model):
    def load(m, name, w):  # fused on disk: this rank takes rows 0:2 and 4:6
        m.p[:2].copy_(w[:2])
        m.p[2:].copy_(w[4:])

    model = loader_model({"p": ((4, 3), F32)}, load)
    plan = loadplan.plan_loads(model, [ParamMeta("w", (6, 3), F32)])
    first, second = plan.get_boxes("w")
    w = torch.arange(18, dtype=F32).view(6, 3)
    binding = plan.bind()
    with pytest.raises(_runtime.InvalidUpdate, match="lacks box 1"):
        binding.apply_boxes([("w", first, w[:2])])
    assert not model.p.any()
    binding.apply_boxes([("w", second, w[4:]), ("w", first, w[:2])])
    assert torch.equal(model.p, torch.cat([w[:2], w[4:]]))
    # The refused batch does not count; the CPU launches nothing.
    assert binding.stats() == {"applies": 1, "kernel_launches": 0, "memcpy_calls": 0}


def test_runtime_unavailable_falls_back_to_torch_copies(monkeypatch, caplog):
    def several(_):
        raise ValueError("load plan: the targets are on several devices (cpu, meta)")

    monkeypatch.setattr(_runtime, "device_of", several)
    result = None
    with caplog.at_level(logging.WARNING, logger="loadplan"):
        _, metas = llama.make(tp_rank=0, tp_size=2)
        result = loadplan.verify(lambda: llama.make(tp_rank=0, tp_size=2)[0], metas)
    assert result, str(result)
    assert result.plan.binding is None
    assert "copying with torch: load plan: the targets are on several devices" in caplog.text


# ---------------------------------------------------------------------------
# Threads


@pytest.mark.parametrize("threads", [1, 3])
def test_thread_count(threads):
    model, metas = llama.make(tp_rank=0, tp_size=2, hidden_size=64, intermediate_size=4096)
    plan = loadplan.plan_loads(model, metas)
    assert plan.bind(num_threads=threads).num_threads == threads
    weights = loadplan.random_weights(metas, seed=6)
    loadplan.load_planned(model, plan, weights)
    want, _ = llama.make(tp_rank=0, tp_size=2, hidden_size=64, intermediate_size=4096)
    loadplan.plan_loads(want, metas)
    with torch.no_grad():
        want.load_weights(weights)
    same_bytes(model, want)


@pytest.mark.parametrize("streaming", ["1", "0"])
def test_a_large_update_with_and_without_streaming_stores(monkeypatch, streaming):
    """Over 64 MiB: the CPU executor writes long runs with non-temporal
    stores, unless LOADPLAN_RUNTIME_STREAMING=0 when binding."""
    kw = dict(tp_rank=0, tp_size=2, vocab_size=65536, hidden_size=1024, intermediate_size=1024,
              num_layers=1, num_heads=8)
    model, metas = llama.make(**kw)
    plan = loadplan.plan_loads(model, metas)
    assert sum(e.nbytes for e in plan.entries.values()) > 64 << 20
    monkeypatch.setenv("LOADPLAN_RUNTIME_STREAMING", streaming)
    plan.bind()
    g = torch.Generator().manual_seed(9)
    weights = [(m.name, torch.empty(m.shape, dtype=m.dtype)) for m in metas]
    for _, w in weights:
        w.view(torch.int16).random_(generator=g)
    loadplan.load_planned(model, plan, weights)
    want, _ = llama.make(**kw)
    loadplan.plan_loads(want, metas)
    with torch.no_grad():
        want.load_weights(weights)
    same_bytes(model, want)


def test_default_threads_and_bad_thread_counts():
    model, metas = llama.make()
    plan = loadplan.plan_loads(model, metas)
    assert plan.bind().num_threads >= 1
    with pytest.raises(ValueError, match="num_threads must be at least 1"):
        plan.bind(num_threads=0)


# ---------------------------------------------------------------------------
# LoadPlan.save / LoadPlan.load


def started(module, **kw) -> torch.nn.Module:
    """A model as an engine has it before updates: loaded once by its own
    loader (which also does the constant writes a plan file leaves out)."""
    model, metas = module.make(**kw)
    with torch.no_grad():
        model.load_weights(loadplan.random_weights(metas, seed=99))
    return model


def test_kinds_are_the_runtime_table():
    assert _runtime.KINDS == ("direct", "fallback", "unneeded")
    model, metas = fp8.make(0, 2)
    plan = loadplan.plan_loads(model, metas)
    kinds = [e.kind for e in plan.entries.values()]
    assert set(kinds) <= set(_runtime.KINDS) and "fallback" in kinds
    assert {k: plan.summary[k] for k in _runtime.KINDS} == {k: kinds.count(k) for k in _runtime.KINDS}


@pytest.mark.parametrize("example", ["qwen2_moe", "fp8"])
def test_a_plan_read_back_prints_as_compiled(example):
    """The runtime prints the JSON and the report of a plan it reads (the
    format library's, with no compiler) as the compiler printed them when it
    compiled it, byte for byte but for how the report ends; qwen2_moe's
    experts are members of one entry when compiled, entries of their own in
    the file."""
    model, metas = EXAMPLES[example].make(0, 2)
    plan = loadplan.plan_loads(model, metas)
    compiled = loadplan.compile_capture(plan.capture, print_json=True)
    read = _runtime.open_plan(plan.plan_bytes)
    assert read.json() == compiled["json"]
    report, want = read.report("read back").splitlines(), compiled["report"].splitlines()
    assert report[:-1] == want[:-1]
    assert report[-1] == want[-1].split("; compiled in")[0] + "; read back"


@pytest.mark.parametrize("example", sorted(EXAMPLES))
def test_save_load_round_trip(example, tmp_path):
    module = EXAMPLES[example]
    kw = dict(tp_rank=1, tp_size=2)
    model, metas = module.make(**kw)
    plan = loadplan.plan_loads(model, metas)
    path = tmp_path / "rank1.plan"
    plan.save(path)
    assert path.read_bytes() == plan.plan_bytes

    fresh = started(module, **kw)
    loaded = LoadPlan.load(path, fresh)
    assert json.loads(loaded.json) == json.loads(plan.json)
    assert loaded.fingerprint == plan.fingerprint and loaded.plan_bytes == plan.plan_bytes
    assert loaded.entries == plan.entries
    assert "loaded from" in loaded.report and loaded.binding is not None
    # The compiler's report, either way: the same lines but for how.
    compiled, read = plan.report.splitlines(), loaded.report.splitlines()
    assert compiled[:-1] == read[:-1]
    assert compiled[-1].split("; compiled in")[0] == read[-1].split("; loaded from")[0]
    for name in plan.entries:
        assert loaded.get_boxes(name) == plan.get_boxes(name)
        a, b = plan.get_dest(name), loaded.get_dest(name)
        assert (a is None) == (b is None)
        for (box_a, view_a), (box_b, view_b) in zip(a or (), b or ()):
            assert box_a == box_b and view_a.shape == view_b.shape
            assert view_a.stride() == view_b.stride()

    weights = loadplan.random_weights(metas, seed=7)
    loadplan.load_planned(model, plan, weights)
    loadplan.load_planned(fresh, loaded, weights)
    same_bytes(model, fresh)
    with torch.no_grad():
        model.load_weights(weights)  # what load_weights writes, too
    same_bytes(model, fresh)


def test_load_reads_what_the_cli_writes(tmp_path):
    path = tmp_path / "llama.plan"
    assert main(["plan", "loadplan.examples.llama", "--tp-size", "2", "--tp-rank", "0",
                 "--plan", str(path)]) == 0
    model = started(llama, tp_rank=0, tp_size=2)
    loaded = LoadPlan.load(path, model, num_threads=1)
    assert loaded.binding.num_threads == 1
    assert loaded.entries["model.layers.0.self_attn.k_proj.weight"].kind == "direct"


def without_norm(**kw):
    model, metas = llama.make(**kw)
    model.model.norm = torch.nn.Identity()  # its weight is the last target
    return model, metas


@pytest.mark.parametrize(
    "make, other, error",
    [
        (llama.make, dict(hidden_size=64),
         r"target 0 \('model.embed_tokens.weight'\) has shape \[64, 64\] "
         r"but the plan expects \[64, 32\]"),
        (llama.make, dict(tp_size=1),
         r"target 0 \('model.embed_tokens.weight'\) has shape \[128, 32\] "
         r"but the plan expects \[64, 32\]"),
        (llama.make, dict(num_layers=3),
         "target 13 of the plan is 'model.norm.weight' but the model's is "
         "'model.layers.2.self_attn.qkv_proj.weight'"),
        (without_norm, {}, "the plan has 14 targets but the model 13: the model lacks "
                           "'model.norm.weight'"),
        (llama.make, dict(dtype=F32), "has dtype float32 but the plan expects bfloat16"),
    ],
)
def test_load_refuses_a_model_with_another_layout(tmp_path, make, other, error):
    kw = dict(tp_rank=0, tp_size=2)
    model, metas = llama.make(**kw)
    path = tmp_path / "p.plan"
    loadplan.plan_loads(model, metas).save(path)
    with pytest.raises(_runtime.FingerprintMismatch, match=error) as info:
        LoadPlan.load(path, make(**{**kw, **other})[0])
    assert isinstance(info.value, RuntimeError) and info.value.code_name == "fingerprint_mismatch"


def test_load_refuses_a_transposed_parameter(tmp_path):
    model, metas = llama.make()
    path = tmp_path / "p.plan"
    loadplan.plan_loads(model, metas).save(path)
    other, _ = llama.make()
    o_proj = other.model.layers[0].self_attn.o_proj
    transposed = torch.zeros(o_proj.weight.shape[::-1], dtype=BF16).t()
    o_proj.weight = torch.nn.Parameter(transposed, requires_grad=False)
    with pytest.raises(_runtime.FingerprintMismatch,
                       match=r"'model.layers.0.self_attn.o_proj.weight'\) has stride \[1, 32\] "
                             r"but the plan expects \[32, 1\]"):
        LoadPlan.load(path, other)


def test_load_refuses_a_malformed_plan_file(tmp_path):
    model, metas = llama.make()
    data = loadplan.plan_loads(model, metas).plan_bytes
    path = tmp_path / "p.plan"
    path.write_bytes(data[: len(data) // 2])
    with pytest.raises(_runtime.InvalidPlan) as info:
        LoadPlan.load(path, llama.make()[0])
    assert isinstance(info.value, ValueError) and info.value.code_name == "invalid_plan"
    path.write_bytes(b"NOTAPLAN" + data[8:])
    with pytest.raises(_runtime.InvalidPlan, match="magic"):
        LoadPlan.load(path, llama.make()[0])
    with pytest.raises(_runtime.StatusError, match="no-such.plan"):
        LoadPlan.load(tmp_path / "no-such.plan", llama.make()[0])


def test_a_loaded_plan_refuses_a_model_whose_tensors_moved(tmp_path):
    model, metas = llama.make()
    path = tmp_path / "p.plan"
    loadplan.plan_loads(model, metas).save(path)
    fresh = started(llama)
    loaded = LoadPlan.load(path, fresh)
    fresh.model.norm.weight.data = torch.zeros_like(fresh.model.norm.weight)
    with pytest.raises(RuntimeError, match="model.norm.weight is not the tensor"):
        loadplan.load_planned(fresh, loaded, loadplan.random_weights(metas, 0))
    with pytest.raises(RuntimeError, match="another model"):
        loadplan.load_planned(started(llama), loaded, [])


def test_plan_or_load_plans_once_then_reads_the_file(tmp_path):
    kw = dict(tp_rank=1, tp_size=2)
    path = tmp_path / "plans" / "llama.plan"
    model, metas = llama.make(**kw)
    made = loadplan.plan_or_load(model, metas, path)
    assert path.read_bytes() == made.plan_bytes
    fresh = started(llama, **kw)
    read = loadplan.plan_or_load(fresh, metas, path)
    assert "loaded from" in read.report
    weights = loadplan.random_weights(metas, seed=4)
    loadplan.load_planned(fresh, read, weights)
    want = started(llama, **kw)
    with torch.no_grad():
        want.load_weights(weights)
    same_bytes(fresh, want)

    _, wider = llama.make(**kw, hidden_size=64)
    with pytest.raises(ValueError, match=r"made for another checkpoint: 'model.embed_tokens"
                                         r".weight' is torch.bfloat16 \[100, 64\]"):
        loadplan.plan_or_load(started(llama, **kw), wider, path)
    with pytest.raises(ValueError, match="the plan has 21 names, the metadata 20"):
        loadplan.plan_or_load(started(llama, **kw), metas[:-1], path)

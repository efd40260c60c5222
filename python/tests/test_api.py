"""The API: plan_loads, LoadPlan, load_planned, verify, check_plannable,
dump_ir and the command line."""

from __future__ import annotations

import json
import logging
import subprocess
from pathlib import Path

import pytest
import torch

import loadplan
from loadplan import ParamMeta
from loadplan.cli import main
from loadplan.tools import find_tool

BF16, F32 = torch.bfloat16, torch.float32


def mixed_loader(m, name, w):
    """A direct name, a fallback (a value read) and an unneeded one."""
    if name == "w":
        m.p.copy_(w.t())
    elif name == "s":
        m.s.fill_(w.item())
    # "other" is another rank's: nothing to do


MIXED = {"p": ((3, 2), BF16), "s": ((1,), F32)}
MIXED_METAS = [ParamMeta("w", (2, 3), BF16), ParamMeta("s", (), F32), ParamMeta("other", (4,), BF16)]


@pytest.fixture
def mixed(loader_model):
    return lambda: loader_model(MIXED, mixed_loader)


def test_param_meta_normalizes_and_checks():
    meta = ParamMeta("w", torch.Size([2, 3]), BF16)
    assert meta.shape == (2, 3) and isinstance(meta.shape, tuple)
    with pytest.raises(ValueError, match="negative"):
        ParamMeta("w", (-1,), BF16)
    with pytest.raises(TypeError):
        ParamMeta("w", (1,), "bfloat16")


def test_plan_entries_boxes_and_destinations(mixed):
    model = mixed()
    plan = loadplan.plan_loads(model, MIXED_METAS)
    assert list(plan.entries) == ["w", "s", "other"]
    w, s, other = plan.entries.values()
    assert (w.kind, w.reason, w.boxes, w.dtype, w.shape) == ("direct", None, (((0, 2), (0, 3)),), BF16, (2, 3))
    assert (s.kind, s.reason, s.boxes) == ("fallback", "its loader reads its values (aten._local_scalar_dense)", ((),))
    assert (other.kind, other.boxes) == ("unneeded", None)
    assert plan.get_boxes("other") is None and plan.get_dest("other") == []
    assert plan.get_dest("s") is None

    [(box, view)] = plan.get_dest("w")
    assert box == ((0, 2), (0, 3)) and view.shape == (2, 3) and view.stride() == (1, 2)
    view.copy_(torch.arange(6, dtype=BF16).view(2, 3))  # writes the live parameter
    assert torch.equal(model.p, torch.arange(6, dtype=BF16).view(2, 3).t())
    assert json.loads(plan.json)["entries"]["w"]["kind"] == "direct"
    assert plan.plan_bytes.startswith(b"LOADPLAN")


def test_fallback_modules_make_the_names_that_copy_into_them_fallbacks():
    from loadplan.examples import llama

    model, metas = llama.make(tp_rank=0, tp_size=1)
    qkv = "model.layers.0.self_attn.qkv_proj"
    plan = loadplan.plan_loads(model, metas, fallback_modules={qkv: "processed after loading"})
    for name, entry in plan.entries.items():
        if name.startswith("model.layers.0.self_attn.") and name.split(".")[-2] in ("q_proj", "k_proj", "v_proj"):
            assert (entry.kind, entry.reason) == ("fallback", "processed after loading"), name
        else:
            assert entry.kind in ("direct", "unneeded"), name
    # A fallback still loads exactly what load_weights loads.
    reference = llama.make(tp_rank=0, tp_size=1)[0]
    reference.load_state_dict(model.state_dict())
    weights = loadplan.random_weights(metas, seed=3)
    loadplan.load_planned(model, plan, weights)
    reference.load_weights(weights)
    for (name, a), b in zip(model.state_dict().items(), reference.state_dict().values()):
        assert torch.equal(a.view(torch.uint8), b.view(torch.uint8)), name


def test_report_is_logged(mixed, caplog):
    with caplog.at_level(logging.DEBUG, logger="loadplan"):
        loadplan.plan_loads(mixed(), MIXED_METAS)
    text = caplog.text
    assert "load plan: 1 fallback names, e.g. ['s']: its loader reads its values" in text
    assert "load plan: 3 names: 1 direct" in text and "1 not needed on this rank" in text
    assert "load plan: unneeded other (0 bytes)" in text


def test_names_declared_twice_are_refused(mixed):
    with pytest.raises(ValueError, match="'w' is declared twice"):
        loadplan.plan_loads(mixed(), MIXED_METAS + [ParamMeta("w", (2, 3), BF16)])


def test_a_lonely_fallback_is_a_compile_error(loader_model):
    def load(m, name, w):
        if name == "w1":
            m.stash = w
        else:
            m.p.copy_(m.stash + w)  # combines two checkpoint tensors

    m = loader_model({"p": ((2,), F32)}, load)
    with pytest.raises(RuntimeError, match="fallback name 'w3' writes nothing itself.*post-load") as e:
        loadplan.plan_loads(m, [ParamMeta("w1", (2,), F32), ParamMeta("w3", (2,), F32)])
    assert isinstance(e.value, loadplan.PlanError) and len(e.value.diagnostics) == 1


def test_check_plannable(loader_model):
    with pytest.raises(RuntimeError, match="no load_weights"):
        loadplan.check_plannable(torch.nn.Linear(2, 2))

    class Parallel:
        enable_eplb = True

    class Config:
        moe_parallel_config = Parallel()

    m = loader_model({}, mixed_loader)
    m.experts = torch.nn.Module()
    m.experts.moe_config = Config()
    with pytest.raises(RuntimeError, match=r"EPLB is not supported \(experts\)"):
        loadplan.plan_loads(m, [])


@pytest.mark.parametrize("how", ["folder", "file", "env"])
def test_dump_ir_writes_what_loadplan_opt_reruns(mixed, tmp_path, monkeypatch, how):
    if how == "folder":
        plan = loadplan.plan_loads(mixed(), MIXED_METAS, dump_ir=tmp_path)
        stem = tmp_path / "plan-0"
    elif how == "file":
        plan = loadplan.plan_loads(mixed(), MIXED_METAS, dump_ir=tmp_path / "x" / "llama.mlir")
        stem = tmp_path / "x" / "llama"
    else:
        monkeypatch.setenv("LOADPLAN_DUMP_IR", str(tmp_path))
        loadplan.plan_loads(mixed(), MIXED_METAS)
        plan = loadplan.plan_loads(mixed(), MIXED_METAS)  # does not overwrite the first
        stem = tmp_path / "plan-1"
    captured = Path(f"{stem}.captured.mlir") if how != "file" else tmp_path / "x" / "llama.mlir"
    assert plan.dumped["captured"] == captured
    assert captured.read_text() == plan.ir
    assert "loadplan.write @t0" in Path(f"{stem}.compiled.mlir").read_text()
    assert json.loads(Path(f"{stem}.plan.json").read_text()) == json.loads(plan.json)

    # The command-line tool this installation has (a wheel's own, else the
    # checkout's build).
    opt = find_tool("loadplan-opt")
    if opt is not None and Path(opt).exists():  # the same plan from the tool
        out = subprocess.run([str(opt), "--loadplan-pipeline", "--loadplan-emit-plan-json=-",
                              "-o", "/dev/null", str(captured)], capture_output=True, text=True)
        assert out.returncode == 0, out.stderr
        assert json.loads(out.stdout)["entries"] == json.loads(plan.json)["entries"]


def test_dump_ir_keeps_the_captured_ir_when_compiling_fails(loader_model, tmp_path):
    def load(m, name, w):
        if name == "a":
            m.stash = w
        else:
            m.p.copy_(torch.cat([m.stash, w]))

    with pytest.raises(loadplan.PlanError, match="plan-0.captured.mlir:"):
        loadplan.plan_loads(loader_model({"p": ((4,), F32)}, load),
                            [ParamMeta("a", (2,), F32), ParamMeta("b", (2,), F32)], dump_ir=tmp_path)
    assert "aten.cat" in (tmp_path / "plan-0.captured.mlir").read_text()


def test_load_planned_copies_direct_names_and_hands_fallbacks_to_the_loader(loader_model):
    seen = []

    def load(m, name, w):
        seen.append(name)
        if name in ("s1", "s2"):
            getattr(m, name).fill_(w.item())
        elif name == "w":
            m.p.copy_(w.t())

    metas = [ParamMeta("s2", (), F32), ParamMeta("w", (2, 3), BF16), ParamMeta("s1", (), F32),
             ParamMeta("other", (1,), F32)]
    model = loader_model({"p": ((3, 2), BF16), "s1": ((1,), F32), "s2": ((1,), F32)}, load)
    plan = loadplan.plan_loads(model, metas)
    seen.clear()
    w = torch.arange(6, dtype=BF16).view(2, 3)
    loadplan.load_planned(model, plan, [("s1", torch.tensor(1.0)), ("w", w),
                                        ("other", torch.ones(1)), ("s2", torch.tensor(2.0))])
    assert seen == ["s1", "s2"]  # fallbacks only, in arrival order
    assert torch.equal(model.p, w.t()) and model.s1.item() == 1.0 and model.s2.item() == 2.0


@pytest.mark.parametrize(
    "bad, error",
    [
        (("nope", torch.zeros(1)), "'nope' is not a declared checkpoint name"),
        (("s", torch.zeros(2)), r"'s' is torch.float32 \(2,\), declared torch.float32 \(\)"),
        (("w", torch.zeros(2, 3, dtype=F32)), "'w' is torch.float32"),
        (("w", [1, 2]), "'w' is not a tensor"),
    ],
)
def test_load_planned_writes_nothing_unless_the_whole_batch_is_valid(mixed, bad, error):
    model = mixed()
    plan = loadplan.plan_loads(model, MIXED_METAS)
    before = model.p.clone()
    batch = [("w", torch.ones(2, 3, dtype=BF16)), ("s", torch.tensor(3.0)), bad]
    with pytest.raises(ValueError, match=error):
        loadplan.load_planned(model, plan, batch)
    assert torch.equal(model.p, before) and model.s.item() == 0.0


def test_load_planned_refuses_a_model_whose_tensors_moved(mixed):
    model = mixed()
    plan = loadplan.plan_loads(model, MIXED_METAS)
    with pytest.raises(RuntimeError, match="another model"):
        loadplan.load_planned(mixed(), plan, [])
    model.p.data = torch.zeros(3, 2, dtype=BF16)  # new storage under the same parameter
    with pytest.raises(RuntimeError, match="p is not the tensor the plan was made for"):
        loadplan.load_planned(model, plan, [("w", torch.ones(2, 3, dtype=BF16))])


def test_verify_passes_on_a_plan_that_matches(mixed):
    result = loadplan.verify(mixed, MIXED_METAS)
    assert result.ok and bool(result) and not result.mismatches
    assert result.tensors == 2 and result.rounds == 2
    assert result.plan.entries["s"].kind == "fallback"


def test_verify_finds_a_loader_that_changes_between_updates(loader_model):
    class Drifting(loader_model):
        """Writes w on its first load, then w shifted by one row: the plan,
        made on the first, is wrong for every later update."""

        loads = 0

        def load_weights(self, weights):
            for _, w in weights:
                self.loads += 1
                self.p.copy_(w if self.loads == 1 else w.roll(1, 0))

    metas = [ParamMeta("w", (3, 2), torch.int32)]
    result = loadplan.verify(lambda: Drifting({"p": ((3, 2), torch.int32)}, None), metas, seed=7)
    assert not result and not result.ok
    [mismatch] = result.mismatches
    assert mismatch.tensor == "p" and mismatch.round == 1
    weights = dict(loadplan.random_weights(metas, seed=8))["w"]
    differ = (weights.roll(1, 0) != weights).nonzero()[0].tolist()
    assert list(mismatch.index) == differ
    assert "p[" in str(result)


def test_random_weights_are_deterministic_per_seed():
    metas = [ParamMeta("b", (64,), torch.bool), ParamMeta("f", (2, 3), torch.float8_e4m3fn)]
    a, b = loadplan.random_weights(metas, 3), loadplan.random_weights(metas, 3)
    assert all(torch.equal(x.view(torch.uint8), y.view(torch.uint8)) for (_, x), (_, y) in zip(a, b))
    assert set(a[0][1].view(torch.uint8).tolist()) == {0, 1}
    assert a[1][1].shape == (2, 3) and a[1][1].dtype == torch.float8_e4m3fn


def test_cli_plan_writes_json_and_ir(tmp_path, capsys):
    out_json, out_ir = tmp_path / "plan.json", tmp_path / "captured.mlir"
    code = main(["plan", "loadplan.examples.llama:make", "--tp-size", "2", "--tp-rank", "1",
                 "--json", str(out_json), "--ir", str(out_ir)])
    assert code == 0
    printed = capsys.readouterr().out
    assert "load plan:" in printed and "direct" in printed
    assert json.loads(out_json.read_text())["entries"]
    assert out_ir.read_text().startswith("// Captured by loadplan")


def test_cli_plan_reports_bad_input(capsys):
    with pytest.raises(SystemExit):
        main(["plan", "loadplan.examples.llama", "--tp-size", "2", "--tp-rank", "2"])
    with pytest.raises(SystemExit, match="cannot import"):
        main(["plan", "no.such.module:make"])

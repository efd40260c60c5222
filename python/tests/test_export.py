"""The torch.export front end (docs/torch-export.md).

Every loader here is exported with the installed torch at test time
(``loadplan.export_loader``), imported by ``loadplan-translate`` and
compiled by the same pipeline; its plan must equal the capture path's
(same kind per name, same boxes, same writes: target, box and region), or
the difference must be one of the documented limitations of torch.export,
checked here as such. Both forms of an exported loader are imported: the
functionalized program (``copy`` / ``*_scatter`` chains feeding mutation
outputs) and the program with its writes in place (``copy_`` into views
of parameters).
"""

from __future__ import annotations

import inspect
import json
import zipfile
from collections.abc import Callable
from pathlib import Path

import pytest
import torch

import loadplan
from loadplan import cli
import test_patterns as patterns
from loadplan import ParamMeta
from loadplan.examples import deepseek_mla, fp8, llama, qwen2_moe
from loadplan.export import compile_export, find_translate, import_export

try:
    find_translate()
except RuntimeError as e:  # built only where LibTorch is found
    pytest.skip(str(e), allow_module_level=True)


# ------------------------------------------------------------ comparison


def _writes(raw: dict, entry: dict) -> list:
    targets = raw["targets"]
    out = []
    for w in entry.get("writes") or ():
        t = targets[w["target"]]
        region = w["region"]
        out.append((f'{t["module"]}.{t["tensor"]}', json.dumps(w["box"]),
                    region["offset"], tuple(region["shape"]), tuple(region["stride"])))
    return sorted(out)


def _targets(raw: dict) -> list:
    return [(t["module"], t["tensor"], t["byte_offset"], tuple(t["shape"]),
             tuple(t["stride"]), t["dtype"]) for t in raw["targets"]]


def assert_same_plan(captured: dict, exported: dict) -> None:
    """Same targets, and per name the same kind, boxes and writes."""
    assert _targets(exported) == _targets(captured)
    assert list(exported["entries"]) == list(captured["entries"])
    for name, want in captured["entries"].items():
        got = exported["entries"][name]
        assert got["kind"] == want["kind"], (name, got.get("reason"), want.get("reason"))
        assert sorted(map(json.dumps, got["boxes"])) == sorted(map(json.dumps, want["boxes"])), name
        assert _writes(exported, got) == _writes(captured, want), name


def plan_both(factory: Callable[[], torch.nn.Module], metas: list[ParamMeta], tmp_path: Path,
              functionalize: bool) -> tuple[loadplan.LoadPlan, dict, dict]:
    """The capture's plan, and (captured, exported) plans as the JSON the
    compiler writes."""
    plan = loadplan.plan_loads(factory(), metas)
    path = tmp_path / "loader.pt2"
    loadplan.export_loader(factory(), metas, path, functionalize=functionalize)
    exported = json.loads(compile_export(path)["json"])
    return plan, json.loads(plan.json), exported


FORMS = [pytest.param(True, id="functional"), pytest.param(False, id="in-place")]


# ------------------------------------------------------ example models


EXAMPLES = {
    "llama": (llama, {}),
    "llama-untied": (llama, {"tie_word_embeddings": False}),
    "qwen2_moe": (qwen2_moe, {}),
    "deepseek_mla": (deepseek_mla, {}),
    "fp8": (fp8, {}),
}


# Models whose loaders dispatch on the class of a parameter (vLLM's v2
# parameter classes: ``type(param) in (RowvLLMParameter, ...)``): torch.export
# traces with plain fake tensors in place of parameters, so the loader takes
# another branch, which fails (docs/torch-export.md, "Limitations").
SUBCLASS_DISPATCH = {"fp8"}


@pytest.mark.parametrize("functionalize", FORMS)
@pytest.mark.parametrize("tp,rank", [(1, 0), (2, 1)])
@pytest.mark.parametrize("case", sorted(EXAMPLES))
def test_example_plan_matches_capture(case, tp, rank, functionalize, tmp_path):
    module, kw = EXAMPLES[case]

    def factory():
        return module.make(rank, tp, **kw)[0]

    metas = module.make(rank, tp, **kw)[1]
    if case in SUBCLASS_DISPATCH:
        with pytest.raises(RuntimeError, match="torch.export cannot export.*FakeTensor"):
            plan_both(factory, metas, tmp_path, functionalize)
        return
    _, captured, exported = plan_both(factory, metas, tmp_path, functionalize)
    assert_same_plan(captured, exported)


def test_llama_translate_prints_ir_whose_plan_matches_capture(tmp_path):
    # The must-show: loadplan-translate on the bundled Llama-style
    # model prints IR; loadplan-opt's pipeline makes the capture's plan of it.
    model, metas = llama.make(1, 2)
    path = tmp_path / "llama.pt2"
    loadplan.export_loader(model, metas, path)
    ir = import_export(path)
    assert 'loadplan.checkpoint "model.layers.0.self_attn.k_proj.weight"' in ir
    assert "loadplan.copy" in ir and "loadplan.slice" in ir
    exported = json.loads(loadplan.compile_ir(ir)["json"])
    captured = json.loads(loadplan.plan_loads(llama.make(1, 2)[0], metas).json)
    assert_same_plan(captured, exported)
    assert exported["stats"]["direct"] == captured["stats"]["direct"] > 0


# -------------------------------------------------------- loader patterns

# Every pattern of test_patterns.py that plans a model through its check():
# the same module and metadata, planned both ways.
PATTERNS = []
for _name, _fn in inspect.getmembers(patterns, inspect.isfunction):
    if not _name.startswith("test_") or "check(" not in inspect.getsource(_fn):
        continue
    _sets = [{}]
    for _mark in getattr(_fn, "pytestmark", []):
        if _mark.name == "parametrize":
            _keys, _values = _mark.args
            _keys = [k.strip() for k in _keys.split(",")]
            _values = [v if len(_keys) > 1 else (v,) for v in _values]
            _sets = [dict(s, **dict(zip(_keys, v))) for s in _sets for v in _values]
    for _args in _sets:
        _id = _name.removeprefix("test_") + "".join(f"-{v}" for v in _args.values())
        PATTERNS.append(pytest.param(_fn, _args, id=_id))

# Patterns torch.export cannot trace (docs/torch-export.md, "Limitations"):
# the loader branches on a value, which torch.export does not know when it
# traces with fake tensors.
DATA_DEPENDENT = {
    # assert torch.isfinite(param).all(): a Python bool of a tensor
    "test_check_against_destination",
    # FusedMoE maps a global expert id through its expert_map buffer and
    # compares the result with -1 (another rank's expert)
    "test_experts_of_other_ranks_are_unneeded",
}


def _compare_check(tmp_path: Path, functionalize: bool):
    def check(factory, metas, kinds, **_):
        plan, captured, exported = plan_both(factory, metas, tmp_path, functionalize)
        assert {n: e["kind"] for n, e in captured["entries"].items()} == kinds
        assert_same_plan(captured, exported)
        return plan  # some patterns look at it further

    return check


@pytest.mark.parametrize("functionalize", FORMS)
@pytest.mark.parametrize("fn,args", PATTERNS)
def test_pattern_plan_matches_capture(fn, args, functionalize, tmp_path, monkeypatch):
    monkeypatch.setattr(patterns, "check", _compare_check(tmp_path, functionalize))
    if fn.__name__ in DATA_DEPENDENT:
        with pytest.raises(RuntimeError, match="torch.export cannot export.*data-dependent"):
            fn(**args)
        return
    fn(**args)


def test_enough_patterns_are_compared():
    compared = [p for p in PATTERNS if p.values[0].__name__ not in DATA_DEPENDENT]
    assert len(compared) >= 15


def test_lonely_fallback_is_the_same_error(tmp_path):
    # A loader that combines two checkpoint tensors: capture and export both
    # refuse it, with the compiler's message naming the name.
    def keep(m, w):
        m.parts = [w]

    def combine(m, w):
        m.p.data.copy_(torch.cat(m.parts + [w]))

    def factory():
        return patterns.Tiny({"p": ((8,), torch.bfloat16)},
                             {"first_half": keep, "second_half": combine})

    metas = [patterns.meta("first_half", 4), patterns.meta("second_half", 4)]
    with pytest.raises(loadplan.PlanError) as captured:
        loadplan.plan_loads(factory(), metas)
    path = tmp_path / "combine.pt2"
    loadplan.export_loader(factory(), metas, path)
    with pytest.raises(loadplan.PlanError) as exported:
        compile_export(path)
    # The same error, at another place of another file.
    def messages(error):
        return [d.split(": error: ", 1)[-1] for d in error.value.diagnostics]

    assert messages(exported) == messages(captured)
    assert "second_half" in messages(exported)[0]


def test_value_read_is_imported_as_such(tmp_path):
    # fill_(w.item()) exports (an unbacked symbol); the importer records the
    # read, and the name falls back as with capture.
    f, metas = patterns.single("p", (), "s", (), lambda p, w: p.fill_(w.item()),
                               dtype=torch.float32)
    path = tmp_path / "item.pt2"
    loadplan.export_loader(f(), metas, path)
    ir = import_export(path)
    assert 'loadplan.value_read %w op "aten.item"' in ir
    out = json.loads(compile_export(path)["json"])
    assert out["entries"]["s"]["kind"] == "fallback"
    assert "reads its values" in out["entries"]["s"]["reason"]


def test_functionalized_program_is_imported_from_scatters(tmp_path):
    # The functional form writes through slice_scatter / select_scatter; the
    # importer undoes them into copies into target regions.
    f, metas = patterns.single("p", (3, 2, 4), "w", (2, 4), lambda p, w: p[2][0:2].copy_(w))
    path = tmp_path / "scatter.pt2"
    program = loadplan.export_loader(f(), metas, path)
    targets = {str(n.target) for n in program.graph.nodes}
    assert "aten.slice_scatter.default" in targets or "aten.select_scatter.default" in targets
    ir = import_export(path)
    assert "loadplan.copy %w to @t0 <offset = 16, shape = [2, 4], stride = [4, 1]>" in ir



@pytest.mark.parametrize("functionalize", FORMS)
@pytest.mark.parametrize("fn,expected", [
    # cat of views of one incoming tensor: a loadplan.cat of the views
    (lambda p, w: p.copy_(torch.cat([w[2:], w[:2]])),
     ["%0 = loadplan.slice %w dim 0 start 2", "%1 = loadplan.slice %w dim 0 start 0 end 2",
      "= loadplan.cat(%0, %1) dim 0 : (tensor<2x4xbf16>, tensor<2x4xbf16>) -> tensor<4x4xbf16>"]),
    # stack: each input unsqueezed at the stacked dim, then their cat
    (lambda p, w: p.copy_(torch.stack([w[3], w[0]], dim=-1)),
     ["= loadplan.unsqueeze %0 dim 1 : tensor<4xbf16> -> tensor<4x1xbf16>",
      "= loadplan.unsqueeze %1 dim 1 : tensor<4xbf16> -> tensor<4x1xbf16>",
      "= loadplan.cat(%2, %3) dim 1 : (tensor<4x1xbf16>, tensor<4x1xbf16>) -> tensor<4x2xbf16>"]),
    # not a rearrangement of the incoming tensor alone: the apply, as before
    (lambda p, w: p.copy_(torch.cat([w[:2], torch.zeros(2, 4, dtype=torch.bfloat16)])),
     ['loadplan.apply "aten.cat"(%0)']),
    # a dtype promotion
    (lambda p, w: p.copy_(torch.cat([w[:2], w[2:].float()]).bfloat16()),
     ['loadplan.apply "aten.cat"(%0, %2)']),
], ids=["cat", "stack", "cat-with-a-constant", "cat-promoting"])
def test_cat_and_stack_are_imported_as_capture_records_them(tmp_path, fn, expected,
                                                            functionalize):
    shape = (4, 2) if "unsqueeze" in expected[0] else (4, 4)
    f, metas = patterns.single("p", shape, "w", (4, 4), fn)
    path = tmp_path / "cat.pt2"
    loadplan.export_loader(f(), metas, path, functionalize=functionalize)
    ir = import_export(path)
    for line in expected:
        assert line in ir, ir
    assert ("loadplan.cat" in ir) == ("apply" not in expected[0])
    captured = json.loads(loadplan.plan_loads(f(), metas).json)
    assert_same_plan(captured, json.loads(compile_export(path)["json"]))


@pytest.mark.parametrize("op,fn,wshape,pshape,expected", [
    ("aten.swapaxes", lambda p, w: p.copy_(w.swapaxes(0, 1)), (4, 6), (6, 4),
     "%0 = loadplan.transpose %w dim0 0 dim1 1 :"),
    # swapdims names its dims as transpose does, not as swapaxes does
    ("aten.swapdims", lambda p, w: p.copy_(w.swapdims(1, 0)), (4, 6), (6, 4),
     "%0 = loadplan.transpose %w dim0 1 dim1 0 :"),
    ("aten.movedim", lambda p, w: p.copy_(w.movedim(2, 0)), (2, 3, 4), (4, 2, 3),
     "%0 = loadplan.as_strided %w <offset = 0, shape = [4, 2, 3], stride = [1, 12, 4]> :"),
    ("aten.diagonal", lambda p, w: p.copy_(w.diagonal(1)), (4, 4), (3,),
     "%0 = loadplan.as_strided %w <offset = 1, shape = [3], stride = [5]> :"),
    ("aten.unfold", lambda p, w: p.copy_(w.unfold(0, 2, 2)), (6,), (3, 2),
     "%0 = loadplan.as_strided %w <offset = 0, shape = [3, 2], stride = [2, 1]> :"),
    ("aten.expand_as", lambda p, w: p.copy_(w.expand_as(p)), (1, 4), (3, 4),
     "%0 = loadplan.expand %w :"),
    ("aten.view_as", lambda p, w: p.copy_(w.view_as(p)), (12,), (2, 6),
     "%0 = loadplan.view %w :"),
    # a transpose below rank 2 moves nothing, for capture as for the importer
    ("aten.transpose", lambda p, w: p.copy_(w.transpose(0, -1)), (4,), (4,),
     "%0 = loadplan.alias %w :"),
], ids=["swapaxes", "swapdims", "movedim", "diagonal", "unfold", "expand_as", "view_as",
        "transpose-1d"])
def test_views_the_aten_view_table_names_are_imported_by_it(tmp_path, op, fn, wshape, pshape,
                                                            expected):
    """Views torch.export keeps as themselves in a program with its writes
    in place (functionalization decomposes some of them), lowered by the
    aten view table capture follows too."""
    f, metas = patterns.single("p", pshape, "w", wshape, fn)
    path = tmp_path / "view.pt2"
    program = loadplan.export_loader(f(), metas, path, functionalize=False)
    assert op in {str(n.target).rsplit(".", 1)[0] for n in program.graph.nodes}
    ir = import_export(path)
    assert expected in ir, ir
    captured = json.loads(loadplan.plan_loads(f(), metas).json)
    assert_same_plan(captured, json.loads(compile_export(path)["json"]))


# ------------------------------------------------------ the command line


def test_cli_plan_from_export(tmp_path, capsys):
    model, metas = llama.make(0, 2)
    path = tmp_path / "llama.pt2"
    loadplan.export_loader(model, metas, path)
    out_json = tmp_path / "plan.json"
    out_ir = tmp_path / "imported.mlir"
    assert cli.main(["plan", "--from-export", str(path), "--json", str(out_json),
                              "--ir", str(out_ir)]) == 0
    printed = capsys.readouterr().out
    assert "direct" in printed
    raw = json.loads(out_json.read_text())
    captured = json.loads(loadplan.plan_loads(llama.make(0, 2)[0], metas).json)
    assert_same_plan(captured, raw)
    assert "loadplan.checkpoint" in out_ir.read_text()


def test_cli_plan_from_a_bad_archive_fails_cleanly(tmp_path, capsys):
    bad = tmp_path / "bad.pt2"
    bad.write_bytes(b"not a zip")
    assert cli.main(["plan", "--from-export", str(bad)]) == 1
    assert "cannot import torch.export program" in capsys.readouterr().err


# ------------------------------------------------------ malformed archives


@pytest.fixture(scope="module")
def archive(tmp_path_factory) -> Path:
    """A good archive to break."""
    path = tmp_path_factory.mktemp("export") / "good.pt2"
    f, metas = patterns.single("p", (4, 4), "w", (8, 4), lambda p, w: p.copy_(w[4:]))
    loadplan.export_loader(f(), metas, path)
    return path


def _rewrite(src: Path, dst: Path, edit: Callable[[str, bytes], bytes | None]) -> Path:
    """A copy of the archive with each record passed through ``edit``
    (None drops it)."""
    with zipfile.ZipFile(src) as zin, zipfile.ZipFile(dst, "w") as zout:
        for info in zin.infolist():
            data = edit(info.filename, zin.read(info.filename))
            if data is not None:
                zout.writestr(info, data)
    return dst


def _translate_error(path: Path) -> str:
    with pytest.raises(RuntimeError) as e:
        import_export(path)
    return str(e.value)


def test_good_archive_imports(archive):
    assert "loadplan.copy" in import_export(archive)


@pytest.mark.parametrize("keep", [0.9, 0.5, 0.1])
def test_truncated_archive(archive, tmp_path, keep):
    data = archive.read_bytes()
    cut = tmp_path / "cut.pt2"
    cut.write_bytes(data[: int(len(data) * keep)])
    assert "not a readable .pt2 archive" in _translate_error(cut)


def test_empty_and_non_zip_files(tmp_path):
    empty = tmp_path / "empty.pt2"
    empty.write_bytes(b"")
    assert "cannot import torch.export program" in _translate_error(empty)
    text = tmp_path / "text.pt2"
    text.write_text("module {}\n")
    assert "not a readable .pt2 archive" in _translate_error(text)


def _edit_program(edit: Callable[[dict], None]) -> Callable[[str, bytes], bytes]:
    def on_record(name: str, data: bytes) -> bytes:
        if name.endswith("models/model.json"):
            program = json.loads(data)
            edit(program)
            return json.dumps(program).encode()
        return data

    return on_record


def test_wrong_schema_version(archive, tmp_path):
    def bump(program):
        program["schema_version"]["major"] += 1

    path = _rewrite(archive, tmp_path / "v.pt2", _edit_program(bump))
    assert "unsupported export schema version" in _translate_error(path)


def test_missing_schema_version(archive, tmp_path):
    path = _rewrite(archive, tmp_path / "nov.pt2",
                    _edit_program(lambda p: p.pop("schema_version")))
    assert "has no schema version" in _translate_error(path)


def test_missing_graph(archive, tmp_path):
    path = _rewrite(archive, tmp_path / "nograph.pt2",
                    _edit_program(lambda p: p["graph_module"].pop("graph")))
    assert "has no graph" in _translate_error(path)


def test_missing_program(archive, tmp_path):
    path = _rewrite(archive, tmp_path / "noprogram.pt2",
                    lambda name, data: None if name.endswith("models/model.json") else data)
    assert "holds no exported program" in _translate_error(path)


def test_program_is_not_json(archive, tmp_path):
    path = _rewrite(archive, tmp_path / "garbage.pt2",
                    lambda name, data: b"{not json" if name.endswith("model.json") else data)
    assert "is not valid JSON" in _translate_error(path)


def test_not_a_torch_export_archive(archive, tmp_path):
    path = _rewrite(archive, tmp_path / "format.pt2",
                    lambda name, data: b"zip" if name.endswith("archive_format") else data)
    assert "not a torch.export archive" in _translate_error(path)


def test_a_dim_of_a_0_dim_tensor_is_an_error(archive, tmp_path):
    def scalar_weight(program):
        graph = program["graph_module"]["graph"]
        for node in graph["nodes"]:
            if "slice" in node["target"]:
                name = node["inputs"][0]["arg"]["as_tensor"]["name"]
                meta = graph["tensor_values"][name]
                meta["sizes"], meta["strides"] = [], []

    path = _rewrite(archive, tmp_path / "scalar.pt2", _edit_program(scalar_weight))
    assert "of a 0-dim tensor" in _translate_error(path)


def test_node_with_undefined_value(archive, tmp_path):
    def break_node(program):
        node = program["graph_module"]["graph"]["nodes"][0]
        node["inputs"][0]["arg"] = {"as_tensor": {"name": "nowhere"}}

    path = _rewrite(archive, tmp_path / "undef.pt2", _edit_program(break_node))
    assert "undefined value 'nowhere'" in _translate_error(path)


def test_inputs_that_are_not_a_dict_of_names(tmp_path):
    class Plain(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.p = torch.nn.Parameter(torch.zeros(4), requires_grad=False)

        def forward(self, w):
            self.p.copy_(w)
            return torch.zeros(())

    with torch.no_grad():
        program = torch.export.export(Plain(), (torch.zeros(4),), strict=False)
    path = tmp_path / "plain.pt2"
    torch.export.save(program, path)
    assert "not one dict of checkpoint tensors" in _translate_error(path)


def test_sizes_out_of_range(archive, tmp_path):
    def huge(program):
        for meta in program["graph_module"]["graph"]["tensor_values"].values():
            meta["strides"] = [{"as_int": 1 << 62} for _ in meta["strides"]]

    path = _rewrite(archive, tmp_path / "huge.pt2", _edit_program(huge))
    assert "out of range" in _translate_error(path)


def test_negative_stride(archive, tmp_path):
    def negative(program):
        for meta in program["graph_module"]["graph"]["tensor_values"].values():
            meta["strides"] = [{"as_int": -1} for _ in meta["strides"]]

    path = _rewrite(archive, tmp_path / "negative.pt2", _edit_program(negative))
    assert "negative stride" in _translate_error(path)

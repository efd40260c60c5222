"""The capture's records: every op a loader made, and the storages and
targets, compiled by building the module in memory
(``_native.compile_records``) instead of parsing IR text. Every plan_loads
in the tests is also checked against the text (conftest.py); these tests
check the records themselves and what the builder says of bad ones."""

from __future__ import annotations

import os
import time

import pytest
import torch

import loadplan
from loadplan import ParamMeta, _ir, _native
from loadplan.capture import capture
from loadplan.examples import qwen2_moe
from loadplan.planning import compile_capture, compile_ir

BF16, F32 = torch.bfloat16, torch.float32


def every_view(m, name, w):
    """One of each recorded op on the way to m.p (a 2x3x4 bf16 tensor)."""
    if name == "a":  # (4, 6): slice, select, unsqueeze, squeeze, expand
        row = w.narrow(1, 2, 4).select(0, 1).unsqueeze(0).squeeze(0)
        m.q.copy_(row.expand(3, 4))
    elif name == "b":  # (24,): view, unflatten, permute, transpose, flatten, reshape
        v = w.view(2, 12).unflatten(1, (4, 3)).permute(0, 2, 1).transpose(0, 1)
        m.p.copy_(v.flatten(0, 1).reshape(2, 3, 4))
    elif name == "c":  # (2, 3, 4) f32: convert, detach (alias), clone
        m.p.copy_(w.to(BF16).detach().clone())
    elif name == "d":  # (8,): as_strided
        m.r.copy_(w.as_strided((2, 2), (1, 2), 1))


METAS = (ParamMeta("a", (4, 6), BF16), ParamMeta("b", (24,), BF16),
         ParamMeta("c", (2, 3, 4), F32), ParamMeta("d", (8,), BF16))


def model(loader_model):
    return loader_model({"p": ((2, 3, 4), BF16), "q": ((3, 4), BF16), "r": ((2, 2), BF16)},
                        every_view)


def test_every_record_op_builds_what_its_text_parses_to(loader_model):
    captured = capture(model(loader_model), METAS)
    declarations, types, strings, checkpoints = captured.records()
    codes = {op[0] for _, _, ops in checkpoints for op in ops}
    used = {_ir.RECORD_OPS[c] for c in codes}
    # torch hands flatten, unflatten and reshape to a dispatch mode as views.
    views = set(_ir.RECORD_OPS[:_ir.COPY + 1])
    assert used == views - {"flatten", "unflatten", "reshape"}
    assert [_ir.RECORD_OPS[d[0]] for d in declarations] == ["storage"] * 3 + ["target"] * 3
    from_records = compile_capture(captured)
    from_text = compile_ir(captured.ir)
    assert from_records["plan"] == from_text["plan"]
    assert from_records["report"].split(";")[0] == from_text["report"].split(";")[0]


def _text_of(declarations, types, strings, checkpoints) -> str:
    """The IR text the records stand for, as MLIR prints what they build."""
    return _native.records_ir(declarations, types, strings, checkpoints)


def test_records_torch_does_not_make_build_as_their_text_parses(loader_model):
    """flatten, unflatten and reshape records (torch.export's graphs have
    them; a dispatch mode sees views), against the parse of their text."""
    captured = capture(model(loader_model), METAS)
    declarations, types, strings, checkpoints = captured.records()
    types = list(types)

    def t(shape):
        types.append((shape, _ir.dtype_code(BF16)))
        return len(types) - 1

    code = _ir.OP_CODES
    b24, b2x12, b2x4x3, b8x3, b2x3x4 = t((24,)), t((2, 12)), t((2, 4, 3)), t((8, 3)), t((2, 3, 4))
    ops = [
        (code["view"], 0, -1, b24, b2x12),
        (code["unflatten"], 1, 0, b2x12, b2x4x3, 1),
        (code["flatten"], 2, 1, b2x4x3, b8x3, 0, 1),
        (code["reshape"], 3, 2, b8x3, b2x3x4),
        (_ir.COPY, 3, b2x3x4, 0, _ir.dtype_code(BF16), 0, 2, 3, 4, 12, 4, 1),
    ]
    built = [("b", b24, ops)]
    from_records = _native.compile_records(declarations, types, strings, built,
                                           print_ir=False, print_json=False)
    from_text = compile_ir(_text_of(declarations, types, strings, built), print_json=False)
    assert from_records["plan"] == from_text["plan"]
    assert "1 direct" in from_records["report"] or "direct" in from_records["report"]


def test_a_name_with_another_op_is_an_apply_record_in_its_place(loader_model):
    def load(m, name, w):
        if name == "sum":
            m.p.copy_(w + 1)  # an apply, and the name falls back
        else:
            getattr(m, name).copy_(w)

    metas = [ParamMeta("x", (4,), BF16), ParamMeta("sum", (4,), BF16),
             ParamMeta("y", (4,), BF16)]
    params = {"x": ((4,), BF16), "p": ((4,), BF16), "y": ((4,), BF16)}
    captured = capture(loader_model(params, load), metas)
    _, _, strings, checkpoints = captured.records()
    assert [c[0] for c in checkpoints] == ["x", "sum", "y"]
    codes = [[_ir.RECORD_OPS[op[0]] for op in c[2]] for c in checkpoints]
    assert codes == [["copy"], ["apply", "copy"], ["copy"]]
    apply = checkpoints[1][2][0]
    assert strings[apply[1]] == "aten.add.Tensor" and apply[2] == -1
    assert '%0 = loadplan.apply "aten.add.Tensor"(%w) : (tensor<4xbf16>) -> tensor<4xbf16>' \
        in captured.ir
    assert compile_capture(captured)["plan"] == compile_ir(captured.ir)["plan"]
    plan = loadplan.plan_loads(loader_model(params, load), metas)
    assert [plan.entries[n].kind for n in ("x", "sum", "y")] == ["direct", "fallback", "direct"]


def test_the_ir_text_is_made_only_when_asked_for(loader_model, monkeypatch):
    from loadplan import planning

    # Without conftest's check, which compiles the text too.
    monkeypatch.setattr(planning, "compile_capture", planning.compile_capture.__wrapped__)
    captured = capture(model(loader_model), METAS)
    assert captured._ir is None
    plan = loadplan.plan_loads(model(loader_model), METAS)
    assert plan.capture._ir is None
    assert 'loadplan.checkpoint "a"' in plan.ir
    assert "%0 = loadplan.slice %w dim 1 start 2 end 6 step 1" in plan.ir


def _records(loader_model):
    captured = capture(model(loader_model), METAS)
    declarations, types, strings, checkpoints = captured.records()
    return (list(declarations), list(types), list(strings),
            [list(c[:2]) + [list(c[2])] for c in checkpoints])


def _refused(declarations, types, strings, checkpoints, match):
    with pytest.raises((_native.CompileError, TypeError, ValueError), match=match):
        _native.compile_records(declarations, types, strings, checkpoints)


def test_bad_records_are_refused_with_a_reason(loader_model):
    decls, types, strings, cks = _records(loader_model)

    def _refused_cks(bad, match):
        _refused(decls, types, strings, bad, match)

    def _refused_types(bad, match):
        _refused(decls, bad, strings, cks, match)

    first = cks[0][2][0]

    bad = [list(c) for c in cks]
    bad[0] = [cks[0][0], cks[0][1], [(99,) + tuple(first[1:])]]
    _refused_cks(bad, "unknown op code 99")

    bad[0] = [cks[0][0], cks[0][1], [(first[0], 0, 7) + tuple(first[3:])]]
    _refused_cks(bad, "value 7 is not defined before its use")

    bad[0] = [cks[0][0], cks[0][1], [tuple(first[:3]) + (10_000,) + tuple(first[4:])]]
    _refused_cks(bad, "type 10000 is not in the table")

    bad[0] = [cks[0][0], cks[0][1], [tuple(first[:5])]]
    _refused_cks(bad, "slice has 4 fields, not 8")

    bad[0] = [cks[0][0], cks[0][1], [tuple(first[:5]) + ("one", 0, 4, 1)]]
    _refused_cks(bad, "other than a 64-bit int")

    bad[0] = [cks[0][0], cks[0][1], [tuple(first[:5]) + (1 << 70, 0, 4, 1)]]
    _refused_cks(bad, "other than a 64-bit int")

    _refused_cks(cks + [None], "not \\(name, type, ops\\)")
    _refused_types(types + [((2,), 999)], "no element type for dtype code 999")
    # The largest code a record may carry: refused without a table that big.
    _refused_types(types + [((2,), 2**32 - 1)],
                   "no element type for dtype code 4294967295")
    _refused_cks([("a", 0)], "not \\(name, type, ops\\)")


def test_a_copy_record_must_name_a_declared_target(loader_model):
    decls, types, strings, cks = _records(loader_model)
    name, type_, ops = cks[3]  # "d": as_strided then copy into r
    copy = list(ops[-1])
    copy[3] = 55
    _refused(decls, types, strings, cks[:3] + [[name, type_, ops[:-1] + [tuple(copy)]]],
             "target 55 is not declared")


def test_a_refused_record_is_reported_at_its_checkpoint(loader_model):
    """A compile of records first builds their ops at no location, which is
    cheaper; one that fails is compiled again at the names' locations, so
    that each error, the builder's or a verifier's, names its checkpoint."""
    decls, types, strings, cks = _records(loader_model)
    name, type_, ops = cks[0]  # "a": w.narrow(1, 2, 4) is the first op
    slice_ = tuple(ops[0])
    for op, says in [((99,) + slice_[1:], "unknown op code 99"),
                     (slice_[:6] + (3,) + slice_[7:], "'loadplan.slice' op")]:
        with pytest.raises(_native.CompileError) as refused:
            _native.compile_records(decls, types, strings,
                                    [[name, type_, [op] + ops[1:]]] + cks[1:])
        first = refused.value.diagnostics[0]
        assert first.startswith(f'loc("{name}"): error: ') and says in first, first


def test_a_process_forked_while_a_module_is_freed_compiles(loader_model):
    """The compile frees each module on a thread of its own. A process
    forked while it runs (multiprocessing's default on Linux) has no such
    thread: its own compiles must not wait for it."""
    # Big enough that freeing its module takes milliseconds: the forks
    # below land while it runs.
    moe, metas = qwen2_moe.make(num_layers=8, num_experts=256)
    captured = capture(moe, metas)
    small = capture(model(loader_model), METAS)
    for _ in range(3):
        compile_capture(captured, print_json=False)
        pid = os.fork()
        if pid == 0:  # the child: a compile, then out without cleanup
            code = 1
            try:
                code = 0 if compile_capture(small, print_json=False)["plan"] else 1
            finally:
                os._exit(code)
        deadline = time.monotonic() + 60
        while (done := os.waitpid(pid, os.WNOHANG)) == (0, 0):
            if time.monotonic() > deadline:
                os.kill(pid, 9)
                os.waitpid(pid, 0)
                pytest.fail("the forked process's compile did not return in 60 s")
            time.sleep(0.02)
        assert os.waitstatus_to_exitcode(done[1]) == 0


def test_names_that_load_alike_compile_as_members_of_one_checkpoint():
    """A layer's experts of one projection differ only in where their copy
    goes: the compile makes them members of one checkpoint, and the plan is
    the one of the text, name by name in arrival order."""
    moe, metas = qwen2_moe.make(num_layers=2, num_experts=8)
    captured = capture(moe, metas)
    out = compile_capture(captured, print_ir=True)
    gate0 = "model.layers.0.mlp.experts.0.gate_proj.weight"
    head = next(line for line in out["ir"].splitlines() if f'"{gate0}"' in line)
    members = [f'"model.layers.0.mlp.experts.{e}.gate_proj.weight"' for e in range(1, 8)]
    assert " members [" in head and all(m in head for m in members), head
    assert out["ir"].count("loadplan.checkpoint") < len(metas) // 2
    text = compile_ir(captured.ir, print_ir=True)
    assert " members [" not in text["ir"]
    assert out["plan"] == text["plan"] and out["json"] == text["json"]
    assert list(_native.Plan.from_bytes(out["plan"]).names()) == [m.name for m in metas]


def test_a_failed_compile_of_members_reports_each_name_at_its_own(loader_model):
    """A compile that fails goes again name by name: an error of one name
    that would be a member is at that name's location."""
    def load(m, name, w):
        m.p.narrow(0, int(name[-1]) * 4, 4).copy_(w)

    metas = [ParamMeta(f"e.{i}", (4,), BF16) for i in range(3)]
    captured = capture(loader_model({"p": ((12,), BF16)}, load), metas)
    decls, types, strings, cks = captured.records()
    cks = list(cks)
    cks.append(("e.1", cks[1][1], cks[1][2]))  # e.1 again, as a fourth name
    with pytest.raises(_native.CompileError) as refused:
        _native.compile_records(decls, types, strings, cks)
    first = refused.value.diagnostics[0]
    assert first.startswith('loc("e.1"): error: ') and "declared twice" in first, first


def test_names_another_rank_loads_are_members_too(loader_model):
    """A loader that only narrows the names another rank holds (no copy):
    they are members of one checkpoint, unneeded each, as in the text."""
    def load(m, name, w):
        i = int(name.split(".")[1])
        view = w.narrow(0, 0, 4)
        if i < 2:
            m.p.narrow(0, i * 4, 4).copy_(view)

    metas = [ParamMeta(f"e.{i}", (8,), BF16) for i in range(6)]
    captured = capture(loader_model({"p": ((8,), BF16)}, load), metas)
    out = compile_capture(captured, print_ir=True)
    head = next(line for line in out["ir"].splitlines() if '"e.2"' in line)
    assert 'members ["e.3" at 3 moved 0, "e.4" at 4 moved 0, "e.5" at 5 moved 0]' in head, head
    assert out["plan"] == compile_ir(captured.ir)["plan"]
    plan = loadplan.plan_loads(loader_model({"p": ((8,), BF16)}, load), metas)
    assert [plan.entries[m.name].kind for m in metas] == ["direct"] * 2 + ["unneeded"] * 4


def test_lower_view_reads_a_calls_arguments_by_position_or_name():
    """The capture's way to the aten view table: a call's args (``self``
    first) and kwargs, as torch dispatches them; an argument that is no int
    is refused, naming it."""
    w = torch.empty(4, 6, dtype=BF16, device="meta")
    index = _native.ATEN_VIEWS.index("aten.slice")
    out = w[:, 2:]
    by_position = _native.lower_view(index, w, out, (w, 1, 2), {})
    by_name = _native.lower_view(index, w, out, (w,), {"dim": 1, "start": 2})
    assert by_position == by_name == [(_ir.OP_CODES["slice"], 1, 2, (1 << 63) - 1, 1)]
    with pytest.raises(TypeError, match="aten.slice's start is not a 64-bit int"):
        _native.lower_view(index, w, out, (w, 1, "two"), {})
    view = _native.ATEN_VIEWS.index("aten.view")
    assert _native.lower_view(view, w, w.view(torch.int16), (w, torch.int16), {}) is None


def events_model(loader_model):
    """One name for each op that is no view: its records, and the IR text
    MLIR prints of them."""
    def load(m, name, w):
        if name == "value":
            w.tolist()
        elif name == "meta":
            w.nonzero()
        elif name == "cat":
            m.p.copy_(torch.cat([w[2:], w[:2]]))
        elif name == "keep":
            m.kept = w
            m.q.copy_(w)
        elif name == "combine":
            m.r.copy_(w + m.kept)
        elif name == "inplace":
            m.p.add_(w)
        elif name == "other":
            torch.zeros(4, dtype=BF16).copy_(w)
        elif name == "read":
            m.q.copy_(w)
            m.p.sum()
        elif name == "zero":
            m.r.zero_()
        elif name == "hand":
            m.sub.s.copy_(w)

    model = loader_model({n: ((4,), BF16) for n in "pqr"}, load)
    model.add_module("sub", loader_model({"s": ((4,), BF16)}, load))
    return model


EVENT_NAMES = ("value", "meta", "cat", "keep", "combine", "inplace", "other", "read",
               "zero", "hand")


def _events(loader_model):
    metas = [ParamMeta(n, (4,), BF16) for n in EVENT_NAMES]
    return capture(events_model(loader_model), metas,
                   fallback_modules={"sub": "loaded by hand"})


def test_every_event_record_builds_what_its_text_parses_to(loader_model):
    captured = _events(loader_model)
    declarations, types, strings, checkpoints = captured.records()
    used = {_ir.RECORD_OPS[op[0]] for _, _, ops in checkpoints for op in ops}
    events = set(_ir.RECORD_OPS[_ir.COPY:]) - {"storage", "target"}
    assert events <= used, events - used
    assert {"aten.add.Tensor", "aten.copy_", "tolist", "keep",
            "loaded by hand", "sub", "s"} <= set(strings)
    ir = captured.ir
    for line in [
        'loadplan.value_read %w op "tolist" : tensor<4xbf16>',
        'loadplan.meta_failure "aten.nonzero"(%w) : tensor<4xbf16>',
        "= loadplan.cat(%0, %1) dim 0 : (tensor<2xbf16>, tensor<2xbf16>) -> tensor<4xbf16>",
        '= loadplan.apply "aten.add.Tensor"(%w) {names = ["keep"]} : '
        "(tensor<4xbf16>) -> tensor<4xbf16>",
        'loadplan.inplace_write "aten.add_.Tensor"(%w) into @t0 : tensor<4xbf16>',
        'loadplan.write_other "aten.copy_"(%w) : tensor<4xbf16>',
        'loadplan.read_target @t0 op "aten.sum"',
        'loadplan.constant_write "aten.zero_" @t2 '
        "<offset = 0, shape = [4], stride = [1]> as bf16",
        'loadplan.apply "aten.copy_"(%w) {reason = "loaded by hand"} : '
        "(tensor<4xbf16>) -> ()",
        'loadplan.inplace_write "aten.copy_"(%w) into @t3 : tensor<4xbf16>',
        'loadplan.target @t3 module "sub" tensor "s" storage @s3 byte_offset 0 stride [1] '
        ": tensor<4xbf16>",
    ]:
        assert line in ir, line
    from_records = compile_capture(captured, print_json=True)
    from_text = compile_ir(ir)
    assert from_records["plan"] == from_text["plan"]
    assert from_records["json"] == from_text["json"]


def test_bad_event_and_declaration_records_are_refused_with_a_reason(loader_model):
    decls, types, strings, cks = _records(loader_model)
    code = _ir.OP_CODES
    name, type_, ops = cks[0]

    def refused_op(op, match):
        _refused(decls, types, strings, [[name, type_, [op]]] + cks[1:], match)

    n = len(strings)
    refused_op((code["value_read"], -1, 999), f"string 999 is not in the table of {n}")
    refused_op((code["value_read"], -1, -2), f"string -2 is not in the table of {n}")
    refused_op((code["value_read"], -1), "value_read has 1 fields, not 2")
    refused_op((code["value_read"], 3, 0), "value 3 is not defined before its use")
    refused_op((code["read_target"], 55, 0), "target 55 is not declared")
    refused_op((code["constant_write"], 0, 0, _ir.dtype_code(BF16), 0, 4),
               "constant_write has 5 fields, not 4")
    refused_op((code["constant_write"], 0, 0, 999, 0, 4, 1),
               "no element type for dtype code 999")
    refused_op((code["inplace_write"], 0, -5, -1), "target -5 is not declared")
    refused_op((code["apply"], 0, -1, 5, -1), "apply's lists overrun its fields")
    refused_op((code["apply"], 0, -1, 1, -1, 3, 0), "apply's lists overrun its fields")
    refused_op((code["apply"], 0, 77, 1, -1, 0), "string 77 is not in the table")
    refused_op((code["apply"], 0, -1, 1, -1, 0, 4, 0), "value 4 defined out of order")
    refused_op((code["apply"], 0, -1, 1, -1, 0, 0), "results are not pairs")
    refused_op((code["cat"], 1, 0, 0, -1), "value 1 defined out of order")
    refused_op((code["storage"], 64), "a storage declaration inside a checkpoint")

    def refused_declarations(bad, match):
        _refused(bad, types, strings, cks, match)

    target = list(decls[-1])
    refused_declarations(decls[:-1] + [tuple(target[:3])], "target has 2 fields, not 5")
    target[3] = 9
    refused_declarations(decls[:-1] + [tuple(target)], "storage 9 is not declared")
    target = list(decls[-1])
    target[1] = 10_000
    refused_declarations(decls[:-1] + [tuple(target)], "string 10000 is not in the table")
    target = list(decls[-1])
    target[5] = 10_000
    refused_declarations(decls[:-1] + [tuple(target)], "type 10000 is not in the table")
    refused_declarations(decls + [(code["value_read"], -1, 0)], "is no declaration")
    refused_declarations(decls + [(99, 0)], "op code 99 is no declaration")
    refused_declarations(decls + [(code["storage"],)], "storage has 0 fields, not 1")
    _refused(decls, types, strings + [3], cks, "a string is not a str")
    _refused(decls, types, "abc", cks, "strings is not a tuple or list")


def test_a_bad_declaration_is_reported_at_its_line(loader_model):
    """The storages and targets are at the lines MLIR prints them on below
    the title line, as in the IR text a capture dumps."""
    decls, types, strings, cks = _records(loader_model)
    target = list(decls[-1])
    target[3] = 9
    with pytest.raises(_native.CompileError) as refused:
        _native.compile_records(decls[:-1] + [tuple(target)], types, strings, cks,
                                source_name="dumped.mlir")
    line = 3 + len(decls) - 1
    assert refused.value.diagnostics[0].startswith(f"dumped.mlir:{line}:3: error: ")

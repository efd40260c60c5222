"""The capture: the loadplan IR text a loader's run over traces produces,
and per-name fault isolation."""

from __future__ import annotations

import pytest
import torch

import loadplan
from loadplan import ParamMeta
from loadplan.capture import TraceUsedAfterPlanning

BF16, F32 = torch.bfloat16, torch.float32


def body(ir: str, name: str) -> list[str]:
    """The ops of checkpoint ``name``'s block, stripped."""
    lines = ir.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith(f'  loadplan.checkpoint "{name}"'))
    end = lines.index("  }", start)
    return [line.strip() for line in lines[start + 1 : end]]


def captured(model, *metas: ParamMeta) -> str:
    return loadplan.capture(model, metas).ir


def test_storages_and_targets_declare_the_live_layout(loader_model):
    m = loader_model({"norm": ((4,), F32), "scale": ((), F32)}, lambda *a: None)
    fused = torch.zeros(6, 4, dtype=BF16)  # one storage, two parameters
    m.a = torch.nn.Parameter(fused[:2], requires_grad=False)
    m.b = torch.nn.Parameter(fused[2:], requires_grad=False)
    m.register_buffer("table", torch.zeros(3, dtype=torch.int32))
    ir = captured(m)
    assert "loadplan.storage @s0 size 16" in ir
    assert "loadplan.storage @s1 size 4" in ir
    assert "loadplan.storage @s2 size 48" in ir
    assert 'loadplan.target @t1 module "" tensor "scale" storage @s1 byte_offset 0 stride [] : tensor<f32>' in ir
    assert 'loadplan.target @t2 module "" tensor "a" storage @s2 byte_offset 0 stride [4, 1] : tensor<2x4xbf16>' in ir
    assert 'loadplan.target @t3 module "" tensor "b" storage @s2 byte_offset 16 stride [4, 1] : tensor<4x4xbf16>' in ir
    assert 'tensor "table" storage @s3 byte_offset 0 stride [1] : tensor<3xi32>' in ir


def test_view_ops_become_loadplan_view_ops(loader_model):
    def load(m, name, w):
        v = w.narrow(1, -4, 4).t().unsqueeze(0).squeeze(0).permute(1, 0)
        m.p.copy_(v.select(0, -1).expand(2, 4).as_strided((4,), (1,)))

    ir = captured(loader_model({"p": ((4,), BF16)}, load), ParamMeta("w", (3, 6), BF16))
    assert body(ir, "w") == [
        "%0 = loadplan.slice %w dim 1 start 2 end 6 step 1 : tensor<3x6xbf16> -> tensor<3x4xbf16>",
        "%1 = loadplan.transpose %0 dim0 0 dim1 1 : tensor<3x4xbf16> -> tensor<4x3xbf16>",
        "%2 = loadplan.unsqueeze %1 dim 0 : tensor<4x3xbf16> -> tensor<1x4x3xbf16>",
        "%3 = loadplan.squeeze %2 dims [0] : tensor<1x4x3xbf16> -> tensor<4x3xbf16>",
        "%4 = loadplan.permute %3 dims [1, 0] : tensor<4x3xbf16> -> tensor<3x4xbf16>",
        "%5 = loadplan.select %4 dim 0 index -1 : tensor<3x4xbf16> -> tensor<4xbf16>",
        "%6 = loadplan.expand %5 : tensor<4xbf16> -> tensor<2x4xbf16>",
        # torch's default offset (the input's own: row 2, column 2) spelt out
        "%7 = loadplan.as_strided %6 <offset = 14, shape = [4], stride = [1]> : tensor<2x4xbf16> -> tensor<4xbf16>",
        "loadplan.copy %7 to @t0 <offset = 0, shape = [4], stride = [1]> as bf16 : tensor<4xbf16>",
    ]


def test_split_chunk_and_unbind_become_one_view_per_output(loader_model):
    def load(m, name, w):
        top, bottom = w.chunk(2)
        left, _ = top.split([1, 2], dim=1)
        m.p.copy_(left.squeeze(1))
        m.q.copy_(bottom.unbind(0)[1])

    ir = captured(loader_model({"p": ((2,), BF16), "q": ((3,), BF16)}, load),
                  ParamMeta("w", (4, 3), BF16))
    assert body(ir, "w") == [
        "%0 = loadplan.slice %w dim 0 start 0 end 2 step 1 : tensor<4x3xbf16> -> tensor<2x3xbf16>",
        "%1 = loadplan.slice %w dim 0 start 2 end 4 step 1 : tensor<4x3xbf16> -> tensor<2x3xbf16>",
        "%2 = loadplan.slice %0 dim 1 start 0 end 1 step 1 : tensor<2x3xbf16> -> tensor<2x1xbf16>",
        "%3 = loadplan.slice %0 dim 1 start 1 end 3 step 1 : tensor<2x3xbf16> -> tensor<2x2xbf16>",
        "%4 = loadplan.squeeze %2 dims [1] : tensor<2x1xbf16> -> tensor<2xbf16>",
        "loadplan.copy %4 to @t0 <offset = 0, shape = [2], stride = [1]> as bf16 : tensor<2xbf16>",
        "%5 = loadplan.select %1 dim 0 index 0 : tensor<2x3xbf16> -> tensor<3xbf16>",
        "%6 = loadplan.select %1 dim 0 index 1 : tensor<2x3xbf16> -> tensor<3xbf16>",
        "loadplan.copy %6 to @t1 <offset = 0, shape = [3], stride = [1]> as bf16 : tensor<3xbf16>",
    ]


def test_views_that_move_nothing_are_aliases(loader_model):
    """The aten view table's special cases (include/loadplan/Records/
    AtenViews.h, which the torch.export importer follows too): a transpose
    below rank 2, a squeeze of no dim of size 1 and an expand to the same
    shape are aliases; a flatten of a 0-d tensor is a view as [1]."""
    def load(m, name, w):
        if name == "v":
            m.p.copy_(w.transpose(0, -1).unsqueeze(0).squeeze(1).expand(1, 4).flatten())
        else:
            m.s.copy_(w.flatten())

    ir = captured(loader_model({"p": ((4,), BF16), "s": ((1,), BF16)}, load),
                  ParamMeta("v", (4,), BF16), ParamMeta("x", (), BF16))
    assert body(ir, "v") == [
        "%0 = loadplan.alias %w : tensor<4xbf16>",
        "%1 = loadplan.unsqueeze %0 dim 0 : tensor<4xbf16> -> tensor<1x4xbf16>",
        "%2 = loadplan.alias %1 : tensor<1x4xbf16>",
        "%3 = loadplan.alias %2 : tensor<1x4xbf16>",
        "%4 = loadplan.view %3 : tensor<1x4xbf16> -> tensor<4xbf16>",
        "loadplan.copy %4 to @t0 <offset = 0, shape = [4], stride = [1]> as bf16 : tensor<4xbf16>",
    ]
    assert body(ir, "x")[0] == "%0 = loadplan.view %w : tensor<bf16> -> tensor<1xbf16>"


def test_other_views_are_the_layout_torch_computed(loader_model):
    """diagonal and unfold are as_strided of the offset and strides torch
    computed (as any view the aten view table does not name would be); a
    view into another dtype is no layout of the elements (an apply)."""
    def load(m, name, w):
        if name == "d":
            m.p.copy_(w.diagonal(1))
        elif name == "u":
            m.q.copy_(w.unfold(0, 2, 2))
        else:
            m.r.copy_(w.view(torch.int16).view(BF16))

    ir = captured(loader_model({"p": ((3,), BF16), "q": ((3, 2), BF16), "r": ((4,), BF16)}, load),
                  ParamMeta("d", (4, 4), BF16), ParamMeta("u", (6,), BF16),
                  ParamMeta("b", (4,), BF16))
    assert body(ir, "d")[0] == (
        "%0 = loadplan.as_strided %w <offset = 1, shape = [3], stride = [5]> "
        ": tensor<4x4xbf16> -> tensor<3xbf16>")
    assert body(ir, "u")[0] == (
        "%0 = loadplan.as_strided %w <offset = 0, shape = [3, 2], stride = [2, 1]> "
        ": tensor<6xbf16> -> tensor<3x2xbf16>")
    assert body(ir, "b")[0].startswith('%0 = loadplan.apply "aten.view.dtype"(%w)')


def test_full_slice_ends_at_int64_max_and_step_is_kept(loader_model):
    ir = captured(loader_model({"p": ((2, 3), BF16)}, lambda m, n, w: m.p.copy_(w[::2])),
                  ParamMeta("w", (4, 3), BF16))
    assert body(ir, "w")[0] == (
        "%0 = loadplan.slice %w dim 0 start 0 end 9223372036854775807 step 2 "
        ": tensor<4x3xbf16> -> tensor<2x3xbf16>"
    )


def test_copy_destination_is_relative_to_the_target_in_its_own_dtype(loader_model):
    def load(m, name, w):
        if name == "q":
            m.qkv.data[2:4].copy_(w.t())
        else:  # a byte view of a bf16 parameter
            m.qkv.view(torch.uint8)[1].copy_(w)

    m = loader_model({"qkv": ((6, 2), BF16)}, load)
    ir = captured(m, ParamMeta("q", (2, 2), BF16), ParamMeta("raw", (4,), torch.uint8))
    assert body(ir, "q") == [
        "%0 = loadplan.transpose %w dim0 0 dim1 1 : tensor<2x2xbf16> -> tensor<2x2xbf16>",
        "loadplan.copy %0 to @t0 <offset = 4, shape = [2, 2], stride = [2, 1]> as bf16 : tensor<2x2xbf16>",
    ]
    assert body(ir, "raw") == [
        "loadplan.copy %w to @t0 <offset = 4, shape = [4], stride = [1]> as ui8 : tensor<4xui8>",
    ]


def test_clone_and_dtype_changes(loader_model):
    def load(m, name, w):
        m.p.copy_(w.t().contiguous())
        m.f.copy_(w.float())

    ir = captured(loader_model({"p": ((3, 2), BF16), "f": ((2, 3), F32)}, load),
                  ParamMeta("w", (2, 3), BF16))
    assert body(ir, "w") == [
        "%0 = loadplan.transpose %w dim0 0 dim1 1 : tensor<2x3xbf16> -> tensor<3x2xbf16>",
        "%1 = loadplan.clone %0 : tensor<3x2xbf16>",
        "loadplan.copy %1 to @t0 <offset = 0, shape = [3, 2], stride = [2, 1]> as bf16 : tensor<3x2xbf16>",
        "%2 = loadplan.convert %w : tensor<2x3xbf16> -> tensor<2x3xf32>",
        "loadplan.copy %2 to @t1 <offset = 0, shape = [2, 3], stride = [3, 1]> as f32 : tensor<2x3xf32>",
    ]


def test_other_ops_run_on_meta_and_write_nothing_real(loader_model):
    def load(m, name, w):
        m.p.add_(w)  # in place into a target
        scratch = torch.zeros(4, dtype=BF16)
        scratch.copy_(w)  # into a tensor that is no target
        doubled = w * 2
        w.mul_(3)  # in place on the incoming tensor
        values, _ = torch.sort(w)
        m.p.copy_(doubled + values)

    m = loader_model({"p": ((4,), BF16)}, load)
    m.p.data.fill_(1)
    ir = captured(m, ParamMeta("w", (4,), BF16))
    assert body(ir, "w") == [
        'loadplan.inplace_write "aten.add_.Tensor"(%w) into @t0 : tensor<4xbf16>',
        'loadplan.write_other "aten.copy_"(%w) : tensor<4xbf16>',
        '%0 = loadplan.apply "aten.mul.Tensor"(%w) : (tensor<4xbf16>) -> tensor<4xbf16>',
        '%1 = loadplan.apply "aten.mul_.Tensor"(%w) : (tensor<4xbf16>) -> tensor<4xbf16>',
        '%2:2 = loadplan.apply "aten.sort"(%1) : (tensor<4xbf16>) -> (tensor<4xbf16>, tensor<4xi64>)',
        '%3 = loadplan.apply "aten.add.Tensor"(%0, %2#0) : (tensor<4xbf16>, tensor<4xbf16>) -> tensor<4xbf16>',
        "loadplan.copy %3 to @t0 <offset = 0, shape = [4], stride = [1]> as bf16 : tensor<4xbf16>",
    ]
    assert torch.equal(m.p, torch.ones(4, dtype=BF16))  # add_ ran on meta only


def test_ops_combining_names_list_the_other_names(loader_model):
    def load(m, name, w):
        if name == "a":
            m.stash = w
        else:
            m.p.copy_(torch.cat([m.stash, w]))

    ir = captured(loader_model({"p": ((4,), BF16)}, load),
                  ParamMeta("a", (2,), BF16), ParamMeta("b", (2,), BF16))
    assert body(ir, "a") == [
        '%0 = loadplan.apply "aten.cat"(%w) {names = ["b"]} : (tensor<2xbf16>) -> tensor<4xbf16>',
        "loadplan.copy %0 to @t0 <offset = 0, shape = [4], stride = [1]> as bf16 : tensor<4xbf16>",
    ]
    assert body(ir, "b") == []


def test_value_read_stops_the_name_and_the_loader_resumes_after_it(loader_model):
    calls = []

    class Scalar(loader_model):
        def load_weights(self, weights):
            calls.append([])
            for name, w in weights:
                calls[-1].append(name)
                if name == "s":
                    self.s.fill_(w.item())
                else:
                    getattr(self, name).copy_(w)

    m = Scalar({"a": ((2,), F32), "s": ((1,), F32), "c": ((2,), F32)}, None)
    ir = captured(m, ParamMeta("a", (2,), F32), ParamMeta("s", (), F32), ParamMeta("c", (2,), F32))
    assert calls == [["a", "s"], ["c"]]
    assert body(ir, "s") == ['loadplan.value_read %w op "aten._local_scalar_dense" : tensor<f32>']
    assert body(ir, "c") == [
        "loadplan.copy %w to @t2 <offset = 0, shape = [2], stride = [1]> as f32 : tensor<2xf32>"
    ]


def test_tolist_is_a_value_read(loader_model):
    ir = captured(loader_model({"p": ((2,), F32)}, lambda m, n, w: m.p.copy_(torch.tensor(w.tolist()))),
                  ParamMeta("w", (2,), F32))
    assert body(ir, "w") == ['loadplan.value_read %w op "tolist" : tensor<2xf32>']


def test_a_loader_reading_ahead_gets_fresh_traces_after_a_stop(loader_model):
    class ReadsAhead(loader_model):
        def load_weights(self, weights):
            pending = list(weights)  # as AutoWeightsLoader's groupby may
            for name, w in pending:
                if name == "s":
                    self.s.fill_(w.item())
                else:
                    getattr(self, name).copy_(w)

    m = ReadsAhead({"s": ((1,), F32), "b": ((2,), F32), "c": ((2,), F32)}, None)
    metas = [ParamMeta("s", (), F32), ParamMeta("b", (2,), F32), ParamMeta("c", (2,), F32)]
    ir = captured(m, *metas)
    assert len(body(ir, "b")) == 1 and len(body(ir, "c")) == 1
    kinds = {n: e.kind for n, e in loadplan.plan_loads(m, metas).entries.items()}
    assert kinds == {"s": "fallback", "b": "direct", "c": "direct"}


def test_a_trace_kept_across_names_is_an_error(loader_model):
    def load(m, name, w):
        if name == "a":
            m.stash = w
        else:
            m.p.fill_(m.stash.item())

    m = loader_model({"p": ((1,), F32)}, load)
    with pytest.raises(RuntimeError, match="keeps an incoming tensor across names"):
        captured(m, ParamMeta("a", (), F32), ParamMeta("b", (), F32), ParamMeta("c", (), F32))


def test_a_trace_used_after_planning_is_an_error(loader_model):
    def load(m, name, w):
        if name == "a":
            m.stash = w
        getattr(m, name).copy_(m.stash)

    m = loader_model({"a": ((2,), F32), "b": ((2,), F32)}, load)
    plan = loadplan.plan_loads(m, [ParamMeta("a", (2,), F32), ParamMeta("b", (2,), F32)])
    with pytest.raises(TraceUsedAfterPlanning, match="used after planning"):
        m.load_weights([("b", torch.ones(2))])
    assert plan.entries["a"].kind == "direct"


def test_constant_writes_happen_and_reads_of_written_targets_are_recorded(loader_model):
    def load(m, name, w):
        m.p[2:].zero_()
        m.p[:2].copy_(w)
        m.p.copy_(m.p * torch.tensor(2.0))  # reads what it wrote
        int(m.table[1])  # a buffer no name writes: the loader's own

    m = loader_model({"p": ((4,), F32)}, load)
    m.register_buffer("table", torch.arange(3))
    m.p.data.fill_(5)
    ir = captured(m, ParamMeta("w", (2,), F32))
    assert body(ir, "w") == [
        'loadplan.constant_write "aten.zero_" @t0 <offset = 2, shape = [2], stride = [1]> as f32',
        "loadplan.copy %w to @t0 <offset = 0, shape = [2], stride = [1]> as f32 : tensor<2xf32>",
        'loadplan.read_target @t0 op "aten.mul.Tensor"',
        'loadplan.constant_write "aten.copy_" @t0 <offset = 0, shape = [4], stride = [1]> as f32',
    ]
    assert m.p.tolist() == [10.0, 10.0, 0.0, 0.0]  # the constant write happened


def test_a_checkpoint_tensor_filled_in_place_is_a_constant_write(loader_model):
    # gpt-oss's loader zeros the down projection's bias on every TP rank
    # but the first (``weight.zero_()``), then copies it: the target gets
    # the constant, now, and the name needs no byte of the checkpoint.
    def load(m, name, w):
        if name == "zeroed":
            w.zero_()
            m.p[:2].copy_(w)
        elif name == "filled":
            w.fill_(1.5).narrow(0, 0, 2)
            m.p[2:].copy_(w[1:].to(F32))  # a view made after the fill, converted
        elif name == "early":
            part = w[:2]  # taken before the fill: holds zeros after it
            w.zero_()
            m.q.copy_(part)
        else:  # only a part filled: not a constant
            w[:1].zero_()
            m.q.copy_(w)

    m = loader_model({"p": ((4,), F32), "q": ((2,), BF16)}, load)
    m.p.data.fill_(7)
    m.q.data.fill_(7)
    metas = [ParamMeta("zeroed", (2,), BF16), ParamMeta("filled", (3,), BF16),
             ParamMeta("early", (2,), BF16), ParamMeta("part", (2,), BF16)]
    ir = captured(m, *metas)
    assert body(ir, "zeroed") == [
        'loadplan.constant_write "aten.zero_" @t0 <offset = 0, shape = [2], stride = [1]> as f32']
    assert body(ir, "filled")[-1] == (
        'loadplan.constant_write "aten.fill_.Scalar" @t0 <offset = 2, shape = [2], stride = [1]> as f32')
    assert m.p.tolist() == [0.0, 0.0, 1.5, 1.5]  # written during planning
    assert "the loader filled early in place" in "\n".join(body(ir, "early"))
    assert not any("constant_write" in line for line in body(ir, "part"))
    assert m.q.tolist() == [7.0, 7.0]  # a fallback writes nothing while planning

    # The filled names need nothing on this rank: their targets hold the
    # constant from planning on.
    plan = loadplan.plan_loads(m, metas)
    assert [plan.entries[n].kind for n in ("zeroed", "filled")] == ["unneeded", "unneeded"]
    assert [plan.entries[n].kind for n in ("early", "part")] == ["fallback", "fallback"]


def test_ops_failing_on_meta_stop_the_name(loader_model):
    ir = captured(loader_model({"p": ((2,), F32)}, lambda m, n, w: m.p.copy_(w[w.nonzero()])),
                  ParamMeta("w", (2,), F32))
    assert body(ir, "w") == ['loadplan.meta_failure "aten.nonzero"(%w) : tensor<2xf32>']


def test_destination_with_no_whole_element_offset_gets_the_element_size_reason():
    class Unaligned(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.flat = torch.zeros(8, dtype=BF16)
            self.p = torch.nn.Parameter(self.flat[1:], requires_grad=False)  # byte 2

        def load_weights(self, weights):
            for _, w in weights:
                self.flat.view(F32)[1:3].copy_(w)  # bytes 4..12: 2 bytes into p

    metas = [ParamMeta("w", (2,), F32)]
    assert body(captured(Unaligned(), *metas), "w") == [
        'loadplan.apply "aten.copy_"(%w) {reason = "copies into a destination viewed '
        'with another element size"} : (tensor<2xf32>) -> ()',
        'loadplan.inplace_write "aten.copy_"(%w) into @t0 : tensor<2xf32>',
    ]
    entry = loadplan.plan_loads(Unaligned(), metas).entries["w"]
    assert (entry.kind, entry.reason) == (
        "fallback", "copies into a destination viewed with another element size")


class Reporting(torch.nn.Module):
    """vLLM's load_weights contract: it returns the names of the
    parameters it loaded. ``q`` takes the checkpoint's ``a``; ``b`` goes
    to ``loader``."""

    def __init__(self, loader):
        super().__init__()
        self.q = torch.nn.Parameter(torch.zeros(4, dtype=F32), requires_grad=False)
        self.r = torch.nn.Parameter(torch.zeros(4, dtype=F32), requires_grad=False)
        self.loader = loader

    def load_weights(self, weights):
        loaded = set()
        for name, w in weights:
            if name == "a":
                self.q.copy_(w)
                loaded.add("q")
            elif self.loader(self, w):
                loaded.add("r")
        return loaded


METAS_AB = [ParamMeta("a", (4,), F32), ParamMeta("b", (4,), F32)]


def test_a_loader_that_reports_loading_what_no_name_wrote_is_refused():
    # A loader that returns without writing (a stale wrapper, say) but is
    # reported as loaded: its names would be "not needed", and r stale.
    with pytest.raises(RuntimeError, match=r"load_weights reports loading 'r', but no declared "
                       r"name was written into it while tracing; the names it wrote nothing "
                       r"of include \['b'\]"):
        loadplan.plan_loads(Reporting(lambda m, w: True), METAS_AB)
    # One that skips the name and says so: b is not needed on this rank.
    plan = loadplan.plan_loads(Reporting(lambda m, w: False), METAS_AB)
    assert [e.kind for e in plan.entries.values()] == ["direct", "unneeded"]
    # One that writes it: both direct.
    plan = loadplan.plan_loads(Reporting(lambda m, w: m.r.copy_(w) is not None), METAS_AB)
    assert [e.kind for e in plan.entries.values()] == ["direct", "direct"]


def test_a_loader_that_raises_is_named_with_its_shapes(loader_model):
    def load(m, name, w):
        param = m.p
        assert param.shape == w.shape
        param.copy_(w)

    m = loader_model({"p": ((4, 2), F32)}, load)
    with pytest.raises(RuntimeError) as e:
        loadplan.plan_loads(m, [ParamMeta("w", (3, 2), F32)])
    message = str(e.value)
    assert message.startswith("load plan: load_weights failed on 'w' (declared float32 [3, 2]): "
                              "AssertionError"), message
    # (pytest adds its own text to the assertion's)
    assert "tests/test_capture.py:" in message and "`assert param.shape == w.shape`" in message
    assert message.endswith("(w: float32 [3, 2] (the incoming 'w'); param: float32 [4, 2])"), \
        message


def test_names_are_escaped_in_the_ir(loader_model):
    name = 'odd "name" \\ with é and\nnewline'
    m = loader_model({"p": ((2,), F32)}, lambda m, n, w: m.p.copy_(w))
    ir = captured(m, ParamMeta(name, (2,), F32))
    assert 'loadplan.checkpoint "odd \\22name\\22 \\\\ with \\C3\\A9 and\\0Anewline"' in ir
    plan = loadplan.plan_loads(m, [ParamMeta(name, (2,), F32)])
    assert plan.entries[name].kind == "direct"


@pytest.mark.parametrize(
    "dtype",
    [torch.bfloat16, torch.float16, torch.float32, torch.float64, torch.float8_e4m3fn,
     torch.float8_e5m2, torch.int8, torch.uint8, torch.int16, torch.int32, torch.int64,
     torch.bool],
)
def test_every_dtype_compiles_to_a_direct_copy(loader_model, dtype):
    m = loader_model({"p": ((2, 3), dtype)}, lambda m, n, w: m.p.copy_(w.t()))
    plan = loadplan.plan_loads(m, [ParamMeta("w", (3, 2), dtype)])
    entry = plan.entries["w"]
    assert (entry.kind, entry.dtype, entry.boxes) == ("direct", dtype, (((0, 3), (0, 2)),))

"""The bad-input tables of the Python API: ``load_planned`` on every bundled
example, ``LoadPlan.load`` of malformed and mismatched plan files, and
transfers (``Sender`` and ``Receiver`` on two threads of this process).

Each row is one malformed input and the exact error it must give; after
each, every byte of the live model's parameters and buffers (their whole
storages) is what it was."""

from __future__ import annotations

import re
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager, nullcontext
from dataclasses import dataclass

import pytest
import torch
import torch.distributed as dist

import loadplan
from loadplan import LoadPlan, _runtime, transfer
from loadplan.examples import deepseek_mla, fp8, llama, qwen2_moe
from loadplan.transfer import Schedule, TransferError, backend_available
from loadplan.verification import model_tensors, random_weights

EXAMPLES = {"llama": llama, "qwen2_moe": qwen2_moe, "deepseek_mla": deepseek_mla, "fp8": fp8}
HEX = "0x[0-9a-f]{16}"


def live_bytes(model: torch.nn.Module) -> dict[str, torch.Tensor]:
    """The bytes of the whole storage of every parameter and buffer."""
    return {
        name: torch.empty(0, dtype=torch.uint8, device=t.device).set_(t.untyped_storage()).clone()
        for name, t in model_tensors(model).items()
    }


def assert_unchanged(model: torch.nn.Module, before: dict[str, torch.Tensor]) -> None:
    after = live_bytes(model)
    assert after.keys() == before.keys()
    changed = [n for n in before if not torch.equal(before[n], after[n])]
    assert not changed, f"live tensors changed: {changed}"


@contextmanager
def replaced(model: torch.nn.Module, target: str) -> Iterator[None]:
    """Parameter ``target`` replaced by a copy while inside (a tensor the
    plan saw, moved since), the original put back after."""
    owner, _, attr = target.rpartition(".")
    module = model.get_submodule(owner)
    original = module._parameters[attr]
    module._parameters[attr] = torch.nn.Parameter(original.detach().clone(), requires_grad=False)
    try:
        yield
    finally:
        module._parameters[attr] = original


def raises_exactly(error: type[BaseException], message: str, pattern: bool = False):
    """``pytest.raises`` of the whole message: ``message`` itself, or a
    pattern for messages with checksums or fingerprints."""
    return pytest.raises(error, match=f"^{message if pattern else re.escape(message)}$")


# ---------------------------------------------------------------------------
# load_planned: a good batch with one bad input


@dataclass
class Case:
    """What a row runs (``call``) and the error it must raise."""

    call: Callable[[], None]
    error: type[BaseException]
    message: str


@dataclass
class Planned:
    module: object
    model: torch.nn.Module
    plan: LoadPlan
    weights: list[tuple[str, torch.Tensor]]

    def name(self, kind: str = "direct") -> str:
        """The last name of ``kind``."""
        return [n for n, e in self.plan.entries.items() if e.kind == kind][-1]

    def tensor(self, name: str) -> torch.Tensor:
        return dict(self.weights)[name]

    def load(self, batch) -> Callable[[], None]:
        return lambda: loadplan.load_planned(self.model, self.plan, batch)

    def replacing(self, name: str, bad) -> Callable[[], None]:
        """The whole batch with ``name`` sent last, as ``bad``."""
        return self.load([(n, t) for n, t in self.weights if n != name] + [(name, bad)])


def _other_dtype(dtype: torch.dtype) -> torch.dtype:
    return torch.float64 if dtype != torch.float64 else torch.float32


def unknown_name(p: Planned) -> Case:
    return Case(p.load(p.weights + [("nope.weight", torch.zeros(2))]), ValueError,
                "load plan: 'nope.weight' is not a declared checkpoint name")


def name_not_a_str(p: Planned) -> Case:
    return Case(p.load(p.weights + [(7, torch.zeros(2))]), ValueError,
                "load plan: 7 is not a declared checkpoint name")


def wrong_dtype(p: Planned) -> Case:
    name = p.name()
    e = p.plan.entries[name]
    other = _other_dtype(e.dtype)
    return Case(p.replacing(name, p.tensor(name).to(other)), ValueError,
                f"load plan: {name!r} is {other} {e.shape}, declared {e.dtype} {e.shape}")


def wrong_shape(p: Planned) -> Case:
    name = p.name()
    e = p.plan.entries[name]
    return Case(p.replacing(name, p.tensor(name).unsqueeze(0)), ValueError,
                f"load plan: {name!r} is {e.dtype} {(1, *e.shape)}, declared "
                f"{e.dtype} {e.shape}")


def wrong_shape_unneeded(p: Planned) -> Case:
    """Names this rank needs nothing of are checked too."""
    kinds = {e.kind for e in p.plan.entries.values()}
    name = p.name("unneeded" if "unneeded" in kinds else "direct")
    e = p.plan.entries[name]
    return Case(p.replacing(name, p.tensor(name).reshape(-1)[:1]), ValueError,
                f"load plan: {name!r} is {e.dtype} (1,), declared {e.dtype} {e.shape}")


def sent_twice(p: Planned) -> Case:
    name = p.name()
    return Case(p.load(p.weights + [(name, p.tensor(name))]), ValueError,
                f"load plan: {name!r} is sent twice in one update")


def not_a_tensor(p: Planned) -> Case:
    name = p.name()
    return Case(p.replacing(name, [0.0]), ValueError,
                f"load plan: {name!r} is not a tensor: list")


def not_a_pair(p: Planned) -> Case:
    name = p.name()
    return Case(p.load(p.weights + [name]), ValueError,
                f"load plan: expected (name, tensor) pairs, got {name!r}")


def a_list_not_a_tuple(p: Planned) -> Case:
    """The message describes the item: a tensor's values are not printed."""
    name, tensor = p.weights[-1]
    return Case(p.load(p.weights[:-1] + [[name, tensor]]), ValueError,
                "load plan: expected (name, tensor) pairs, got a list of 2 items")


def _meta_tensor_for(p: Planned, kind: str) -> Case:
    """A tensor without data for a name of `kind` (a direct one where the
    plan has none)."""
    kinds = {e.kind for e in p.plan.entries.values()}
    name = p.name(kind if kind in kinds else "direct")
    e = p.plan.entries[name]
    return Case(p.replacing(name, torch.empty(e.shape, dtype=e.dtype, device="meta")),
                ValueError, f"load plan: {name!r} is a meta tensor, which holds no data")


def meta_tensor(p: Planned) -> Case:
    """A tensor without data, last; a fallback (its load_weights would fail
    after the direct names were written)."""
    return _meta_tensor_for(p, "fallback")


def sparse_tensor(p: Planned) -> Case:
    name = p.name()
    e = p.plan.entries[name]
    sparse = torch.sparse_coo_tensor(torch.zeros(len(e.shape), 0, dtype=torch.long),
                                     torch.zeros(0, dtype=e.dtype), e.shape,
                                     check_invariants=True)
    return Case(p.replacing(name, sparse), ValueError,
                f"load plan: {name!r} is a torch.sparse_coo tensor, not a dense (strided) one")


def meta_tensor_unneeded(p: Planned) -> Case:
    """A name this rank needs nothing of is still checked for data: the
    trainer sent a tensor that no rank can load."""
    return _meta_tensor_for(p, "unneeded")


def mkldnn_tensor(p: Planned) -> Case:
    """A layout without strided storage, which claims to be contiguous."""
    name = p.name()
    e = p.plan.entries[name]
    opaque = torch.zeros(e.shape, dtype=e.dtype).to_mkldnn()
    assert opaque.layout == torch._mkldnn and opaque.is_contiguous()
    return Case(p.replacing(name, opaque), ValueError,
                f"load plan: {name!r} is a torch._mkldnn tensor, not a dense (strided) one")


def another_model(p: Planned) -> Case:
    other, _ = p.module.make(tp_rank=1, tp_size=2)
    return Case(lambda: loadplan.load_planned(other, p.plan, p.weights), RuntimeError,
                "load plan: the plan was made for another model")


def replaced_tensor(p: Planned) -> Case:
    """A target the plan writes was replaced since planning."""
    target = p.plan.entries[p.name()].writes[0].target

    def call() -> None:
        with replaced(p.model, target):
            loadplan.load_planned(p.model, p.plan, p.weights)

    return Case(call, RuntimeError,
                f"load plan: {target} is not the tensor the plan was made for (it was "
                "replaced or moved); plan again")


BATCHES = [unknown_name, name_not_a_str, wrong_dtype, wrong_shape, wrong_shape_unneeded,
           sent_twice, not_a_tensor, not_a_pair, a_list_not_a_tuple, meta_tensor,
           meta_tensor_unneeded, sparse_tensor, mkldnn_tensor, another_model, replaced_tensor]


@pytest.fixture(scope="module")
def planned() -> Callable[[str, str], Planned]:
    """Rank 1 of 2 of each example, planned once for the module, applied
    through the runtime or, as where it cannot bind, with torch."""
    cache: dict[tuple[str, str], Planned] = {}

    def get(example: str, through: str) -> Planned:
        if (example, through) not in cache:
            module = EXAMPLES[example]
            model, metas = module.make(tp_rank=1, tp_size=2)
            plan = loadplan.plan_loads(model, metas)
            if through == "runtime":
                plan.bind(num_threads=1)
            else:
                plan.runtime.unusable = "the test copies with torch"
            cache[example, through] = Planned(module, model, plan,
                                              random_weights(metas, seed=1))
        return cache[example, through]

    return get


@pytest.mark.parametrize("row", BATCHES, ids=lambda f: f.__name__)
@pytest.mark.parametrize("through", ["runtime", "torch"])
@pytest.mark.parametrize("example", sorted(EXAMPLES))
def test_load_planned_refuses_a_bad_batch_and_writes_nothing(planned, example, through, row):
    """The same check, and message, whether a binding applies the batch or
    torch does."""
    p = planned(example, through)
    case = row(p)
    before = live_bytes(p.model)
    with raises_exactly(case.error, case.message):
        case.call()
    assert_unchanged(p.model, before)


# ---------------------------------------------------------------------------
# LoadPlan.load: malformed and mismatched plan files


def _edit(data: bytes, edit: Callable[[bytearray], None]) -> bytes:
    out = bytearray(data)
    edit(out)
    return bytes(out)


def _flip(at: int) -> Callable[[bytearray], None]:
    def edit(b: bytearray) -> None:
        b[at] ^= 1

    return edit


# (id, the file's bytes (None: no file; "dir": a directory) from the good
# plan's, the model it is loaded into (llama keyword arguments, or another
# example), the error, its message with {path} for the file's path; a
# pattern where it holds checksums or fingerprints).
PLAN_FILES = [
    ("empty", lambda d: b"", {}, _runtime.InvalidPlan,
     "{path}: plan is truncated: 0 bytes, but the header alone takes 40", False),
    ("truncated", lambda d: d[:-1], {}, _runtime.InvalidPlan,
     "{path}: plan is truncated: the header announces a payload of {payload} bytes but "
     "{payload_less} follow", False),
    ("trailing_byte", lambda d: d + b"\0", {}, _runtime.InvalidPlan,
     "{path}: 1 bytes follow the payload the header announces", False),
    ("bad_magic", lambda d: b"NOTAPLAN" + d[8:], {}, _runtime.InvalidPlan,
     '{path}: not a plan file: the magic is not "LOADPLAN"', False),
    ("bad_version", lambda d: _edit(d, _flip(9)), {}, _runtime.InvalidPlan,
     "{path}: plan format version 260 is not supported (this runtime reads version 4)",
     False),
    ("damaged_payload", lambda d: _edit(d, _flip(60)), {}, _runtime.InvalidPlan,
     "{path}: checksum mismatch: the header says {hex} but the payload hashes to {hex} "
     r"\(the file is damaged\)", True),
    ("damaged_fingerprint", lambda d: _edit(d, _flip(16)), {}, _runtime.InvalidPlan,
     "{path}: the header's fingerprint {hex} is not that of the plan's own targets "
     r"\({hex}\)", True),
    ("no_file", None, {}, _runtime.StatusError,
     "cannot open plan file '{path}': No such file or directory", False),
    ("a_directory", "dir", {}, _runtime.StatusError, "cannot read plan file '{path}'", False),
    ("other_shapes", lambda d: d, dict(hidden_size=64), _runtime.FingerprintMismatch,
     r"target 0 \('model\.embed_tokens\.weight'\) has shape \[64, 64\] but the plan expects "
     r"\[64, 32\]; the plan was made for another layout \(its fingerprint is {hex}, this "
     r"layout's {hex}\)", True),
    ("other_dtype", lambda d: d, dict(dtype=torch.float32), _runtime.FingerprintMismatch,
     r"target 0 \('model\.embed_tokens\.weight'\) has dtype float32 but the plan expects "
     r"bfloat16; the plan was made for another layout \(its fingerprint is {hex}, this "
     r"layout's {hex}\)", True),
    ("more_layers", lambda d: d, dict(num_layers=3), _runtime.FingerprintMismatch,
     "target 13 of the plan is 'model.norm.weight' but the model's is "
     "'model.layers.2.self_attn.qkv_proj.weight'", False),
    ("other_model", lambda d: d, "qwen2_moe", _runtime.FingerprintMismatch,
     "target 2 of the plan is 'model.layers.0.self_attn.o_proj.weight' but the model's "
     "is 'model.layers.0.self_attn.qkv_proj.bias'", False),
]


@pytest.mark.parametrize("_id, make, into, error, message, pattern", PLAN_FILES,
                         ids=[row[0] for row in PLAN_FILES])
def test_load_refuses_a_bad_plan_file_and_writes_nothing(tmp_path, _id, make, into, error,
                                                         message, pattern):
    model, metas = llama.make(tp_rank=0, tp_size=2)
    data = loadplan.plan_loads(model, metas).plan_bytes
    path = tmp_path / "rank0.plan"
    if make == "dir":
        path.mkdir()
    elif make is not None:
        path.write_bytes(make(data))
    module, kw = (EXAMPLES[into], {}) if isinstance(into, str) else (llama, into)
    target, target_metas = module.make(**{"tp_rank": 0, "tp_size": 2, **kw})
    with torch.no_grad():  # as an engine's model is before updates
        target.load_weights(random_weights(target_metas, seed=2))
    payload = len(data) - 40
    text = message.format(path=re.escape(str(path)) if pattern else path, hex=HEX,
                          payload=payload, payload_less=payload - 1)
    before = live_bytes(target)
    with raises_exactly(error, text, pattern):
        LoadPlan.load(path, target)
    assert_unchanged(target, before)


# ---------------------------------------------------------------------------
# Transfers: one sender, one atomic receiver, on two threads

gloo = pytest.mark.skipif(not backend_available("gloo"), reason="built without Gloo")
TIMEOUT = 20.0  # seconds: a rank that hangs fails the row instead


@pytest.fixture(scope="module")
def receivers() -> tuple[list, dict, dict]:
    """An fp8 Llama (fallbacks and all) at TP=1 and both ranks of TP=2, each
    planned once: (model, plan) by name; the checkpoint and its tensors."""
    ends = {}
    for name, rank, size in (("tp1", 0, 1), ("tp2_rank0", 0, 2), ("tp2_rank1", 1, 2)):
        model, metas = fp8.make(tp_rank=rank, tp_size=size)
        ends[name] = (model, loadplan.plan_loads(model, metas))
    return metas, ends, dict(random_weights(metas, seed=3))


class _OtherPlan(loadplan.Receiver):
    """A receiver that tells rank 0 another plan than its own."""

    other: bytes = b""

    def _offer(self) -> dict:
        return {"receiver": (self.staging_cap, self.atomic, _runtime.open_plan(self.other),
                             self.other)}


def _run_pair(sender_make, sender_act, receiver_make, receiver_act) -> dict[str, object]:
    """Makes both ends and runs one update, each on its own thread; returns
    each side's exception (None: none)."""
    store = dist.HashStore()
    common = dict(world_size=2, num_senders=1, store=store, engine="m_to_n", timeout=TIMEOUT,
                  num_threads=1, name="bad_input")
    out: dict[str, object] = {}

    def run(role: str, make, act) -> None:
        end = None
        try:
            end = make(common)
            if act is not None:
                act(end)
            out[role] = None
        except Exception as e:  # the row checks it
            out[role] = e
        finally:
            if end is not None:
                end.close()

    threads = [threading.Thread(target=run, args=("sender", sender_make, sender_act)),
               threading.Thread(target=run, args=("receiver", receiver_make, receiver_act))]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=4 * TIMEOUT)
    assert not any(t.is_alive() for t in threads), "a rank hangs"
    return out


def _sent(weights: dict, name: str, bad) -> dict:
    """Every held tensor, ``name``'s replaced (dropped when ``bad`` is None,
    added when new)."""
    out = {n: t for n, t in weights.items() if n != name}
    if bad is not None:
        out[name] = bad
    return out


NORM = "model.norm.weight"  # bf16 (320,)
# What every rank reads of a rank that refuses the update (its inputs,
# before any byte moves), fails it (while the bytes move) or refuses the
# set-up (making the endpoints).
FROM_SENDER = "load plan: rank 0 (sender 0) refused the update: "
FROM_RECEIVER = "load plan: rank 1 (receiver 0) refused the update: "
SENDER_FAILED = "load plan: rank 0 (sender 0) failed the update: "
RECEIVER_SET_UP = "load plan: rank 1 (receiver 0) refused the set-up: "


def _sender_input(bad: Callable[[dict], dict], message: str):
    """A row whose sender sends ``bad(weights)``: the sender raises its
    ValueError, the receiver gets its message."""
    return dict(send=bad, sender=(ValueError, message),
                receiver=(TransferError, FROM_SENDER + message))


def _everyone(message: str) -> dict:
    """A row in which every rank raises the same TransferError."""
    return dict(sender=(TransferError, message), receiver=(TransferError, message))


# Per row: how the sender sends (``send``: weights -> what it sends, None:
# the row fails before; ``fail_round``: it fails on purpose), which
# receiver it is (``model``, default "tp1"), the plan it tells rank 0
# (``tells``) or what it breaks (``replace``), and each side's error.
TRANSFERS = {
    "wrong_dtype": _sender_input(
        lambda w: _sent(w, NORM, w[NORM].float()),
        f"load plan: {NORM!r} is torch.float32 (320,) on cpu; this sender holds "
        "torch.bfloat16 (320,) on cpu"),
    "wrong_shape": _sender_input(
        lambda w: _sent(w, NORM, w[NORM][:16]),
        f"load plan: {NORM!r} is torch.bfloat16 (16,) on cpu; this sender holds "
        "torch.bfloat16 (320,) on cpu"),
    "meta_tensor": _sender_input(
        lambda w: _sent(w, NORM, torch.empty(320, dtype=torch.bfloat16, device="meta")),
        f"load plan: {NORM!r} is torch.bfloat16 (320,) on meta; this sender holds "
        "torch.bfloat16 (320,) on cpu"),
    "sparse_tensor": _sender_input(
        lambda w: _sent(w, NORM, w[NORM].to_sparse()),
        f"load plan: {NORM!r} is a torch.sparse_coo tensor, not a dense (strided) one"),
    "not_a_tensor": _sender_input(
        lambda w: _sent(w, NORM, [0.0] * 320),
        f"load plan: {NORM!r} is list; this sender holds torch.bfloat16 (320,) on cpu"),
    "missing_name": _sender_input(
        lambda w: _sent(w, NORM, None),
        f"load plan: the update of sender rank 0 lacks 1 names this rank holds, e.g. [{NORM!r}]"),
    "extra_name": _sender_input(
        lambda w: _sent(w, "nope", torch.zeros(1)),
        "load plan: the update of sender rank 0 has 1 names it does not hold, e.g. ['nope']"),
    "peer_fails_mid_update": dict(
        send=lambda w: w, fail_round=0,
        **_everyone(SENDER_FAILED + "debug_fail_round: this rank failed on purpose at round 0")),
    "receiver_tensor_replaced": dict(
        send=lambda w: w, replace=NORM,
        sender=(TransferError, FROM_RECEIVER + f"load plan: {NORM} is not the tensor the plan "
                "was made for (it was replaced or moved); plan again"),
        receiver=(RuntimeError, f"load plan: {NORM} is not the tensor the plan was made for "
                  "(it was replaced or moved); plan again")),
    "schedule_of_another_layout": dict(
        send=None, tells="tp2_rank0",
        **_everyone(RECEIVER_SET_UP + "receiver 0: the plan (fingerprint {hex}) is not the one "
                    "the schedule was made for (fingerprint {hex}); build the schedule again")),
    "schedule_of_another_rank": dict(
        send=None, model="tp2_rank1", tells="tp2_rank0",
        **_everyone(RECEIVER_SET_UP + "receiver 0: the plan is not the one the schedule was made "
                    "for: both are of layout {hex} but their entries, boxes or writes differ (a "
                    "plan of another rank?); build the schedule again")),
    "schedule_damaged_on_its_way": dict(
        send=None, damage=lambda b: b[:-1],
        **_everyone("load plan: schedule: the header says {payload} payload bytes but "
                    "{payload_less} follow")),
}


@gloo
@pytest.mark.parametrize("row", list(TRANSFERS))
def test_a_bad_transfer_fails_every_rank_and_leaves_the_receiver(receivers, row, monkeypatch):
    metas, ends, weights = receivers
    r = TRANSFERS[row]
    model, plan = ends[r.get("model", "tp1")]
    sizes = {}
    if "damage" in r:  # what rank 0 hands every rank: its status, then the schedule
        store_set = transfer.rendezvous.Rendezvous.store_set

        def damaged(self, key: str, value: bytes) -> None:
            if key.endswith("/schedule"):
                status, data = value[:4], value[4:]
                sizes.update(payload=len(data) - 40, payload_less=len(data) - 41)
                value = status + r["damage"](data)
            store_set(self, key, value)

        monkeypatch.setattr(transfer.rendezvous.Rendezvous, "store_set", damaged)

    def make_sender(common):
        return loadplan.Sender(metas, rank=0, debug_fail_round=r.get("fail_round", -1), **common)

    def make_receiver(common):
        cls = loadplan.Receiver
        if "tells" in r:
            cls = type("Other", (_OtherPlan,), {"other": ends[r["tells"]][1].plan_bytes})
        return cls(model, plan, rank=1, atomic=True, **common)

    def receive(end) -> None:
        with replaced(model, r["replace"]) if "replace" in r else nullcontext():
            end.receive()

    send = r["send"]
    before = live_bytes(model)
    got = _run_pair(make_sender, (lambda end: end.send(send(weights))) if send else None,
                    make_receiver, receive if send else None)
    for role in ("sender", "receiver"):
        error, message = r[role]
        e = got[role]
        assert isinstance(e, error), (role, e)
        pattern = re.escape(message.format(hex="{hex}", **sizes)).replace(
            re.escape("{hex}"), HEX)
        assert re.fullmatch(pattern, str(e)), (role, str(e))
    assert_unchanged(model, before)


# Schedule bytes as every rank reads them (loadplan_schedule_open_bytes):
# (id, the bytes from a good schedule's, the message; a pattern where it
# holds checksums).
SCHEDULE_BYTES = [
    ("empty", lambda d: b"", "schedule: truncated: 0 bytes, but the header alone takes 40",
     False),
    ("a_plan_file", None, 'schedule: not a schedule file: the magic is not "LPSCHEDL"', False),
    ("bad_version", lambda d: _edit(d, _flip(9)), "schedule: version 259 is not 3, the version this runtime reads", False),
    ("bad_header_size", lambda d: _edit(d, _flip(12)), "schedule: header size 41 is not 40",
     False),
    ("truncated", lambda d: d[:-1],
     "schedule: the header says {payload} payload bytes but {payload_less} follow", False),
    ("damaged_payload", lambda d: _edit(d, _flip(50)),
     "schedule: checksum {hex} of the payload is not the header's {hex}", True),
]


@gloo
@pytest.mark.parametrize("_id, make, message, pattern", SCHEDULE_BYTES,
                         ids=[row[0] for row in SCHEDULE_BYTES])
def test_bad_schedule_bytes_are_refused(receivers, _id, make, message, pattern):
    metas, ends, _ = receivers
    model, plan = ends["tp1"]
    good = Schedule.build("m_to_n", 2, metas, [(0, {m.name: None for m in metas}, 0)],
                          [(1, plan.plan_bytes, 0, True)]).to_bytes()
    data = plan.plan_bytes if make is None else make(good)
    text = "load plan: " + message.format(hex=HEX if pattern else "{hex}",
                                          payload=len(good) - 40, payload_less=len(good) - 41)
    with raises_exactly(TransferError, text, pattern) as info:
        Schedule.from_bytes(data)
    assert info.value.code_name == "invalid_plan"

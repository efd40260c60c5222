"""Transfer schedules and the Python API in one process: ``Schedule.build``
from real plans (bytes moved per engine, the printout, the file round trip
and ``loadplan schedule show``), refusals, argument errors, and
one Sender and one Receiver on two threads over Gloo."""

from __future__ import annotations

import subprocess
import sys
import threading
from math import prod

import pytest
import torch
import torch.distributed as dist

import loadplan
from loadplan.examples import fp8, llama
from loadplan.transfer import Schedule, backend_available, shard_box
from loadplan.verification import first_difference, copy_bytes, model_tensors, random_weights

pytestmark = pytest.mark.skipif(not backend_available("gloo"), reason="built without Gloo")


@pytest.fixture(scope="module")
def tp2():
    """Plans of both ranks of a TP=2 Llama with fp8 weights and fallbacks."""
    plans = []
    for rank in range(2):
        model, metadata = fp8.make(tp_rank=rank, tp_size=2)
        plans.append(loadplan.plan_loads(model, metadata))
    return metadata, plans


def _needed(plans) -> int:
    return sum(e.nbytes for p in plans for e in p.entries.values())


def _model_bytes(metadata) -> int:
    return sum(m.dtype.itemsize * prod(m.shape) for m in metadata)


def _build(engine, metadata, plans, holdings_per_sender, cap=1 << 20):
    senders = [(i, h, cap) for i, h in enumerate(holdings_per_sender)]
    receivers = [(len(senders) + i, p.plan_bytes, cap, False) for i, p in enumerate(plans)]
    return Schedule.build(engine, len(senders) + len(receivers), metadata, senders, receivers)


def test_each_engine_moves_what_it_should(tp2):
    metadata, plans = tp2
    whole = {m.name: None for m in metadata}
    for engine in ("sliced", "m_to_n"):
        s = _build(engine, metadata, plans, [whole])
        assert s.summary.bytes_moved == _needed(plans)
        assert s.summary.bytes_needed == _needed(plans)
    full = _build("full", metadata, plans, [whole, whole])
    assert full.summary.bytes_moved == 2 * _model_bytes(metadata)
    assert full.summary.engine == "full"
    assert full.summary.num_senders == 2


def test_the_file_round_trips_and_prints(tp2, tmp_path):
    metadata, plans = tp2
    rows = [{m.name: shard_box(m.shape, 0, i, 2) if m.shape and m.shape[0] >= 2 else None
             for m in metadata} for i in range(2)]
    s = _build("m_to_n", metadata, plans, rows, cap=4096)
    assert s.summary.num_rounds > 1
    assert s.summary.max_receiver_staging <= 4096
    data = s.to_bytes()
    again = Schedule.from_bytes(data)
    assert again.to_bytes() == data
    assert again.summary == s.summary
    text = str(s)
    assert text.startswith("schedule: engine m_to_n, 4 ranks, 2 senders, 2 receivers")
    assert "sender 1 (rank 1) -> receiver 0 (rank 2):" in text
    path = tmp_path / "tp2.schedule"
    s.save(path)
    out = subprocess.run([sys.executable, "-m", "loadplan.cli", "schedule", "show", str(path),
                          "--summary"], capture_output=True, text=True, check=True).stdout
    assert out == s.text(pieces=False)
    assert "->" not in out


def test_small_pieces_travel_together_and_rounds_overlap(tp2, tmp_path):
    metadata, plans = tp2
    whole = {m.name: None for m in metadata}
    cap = 1 << 20
    senders = [(0, whole, cap)]
    receivers = [(1 + i, p.plan_bytes, cap, False) for i, p in enumerate(plans)]
    alone = Schedule.build("m_to_n", 3, metadata, senders, receivers, join_below=1,
                           overlap=False)
    joined = Schedule.build("m_to_n", 3, metadata, senders, receivers)
    a, j = alone.summary, joined.summary
    assert (a.join_below, a.overlap) == (1, False)
    assert (j.join_below, j.overlap) == (loadplan.transfer.DEFAULT_JOIN_BELOW, True)
    assert a.num_messages == a.num_pieces
    # Every piece of this model is small: few messages per round and pair.
    assert j.num_messages < j.num_pieces / 4
    assert j.bytes_moved == a.bytes_moved == _needed(plans)
    assert j.max_receiver_staging <= cap and j.max_sender_staging <= cap
    assert a.fingerprint != j.fingerprint
    # The listing and `schedule show` say which pieces go together.
    text = joined.text()
    assert f"{j.num_pieces} pieces in {j.num_messages} messages" in text
    assert "pieces under 262144 bytes travel together; rounds overlap" in text
    assert "\n  + round " in text
    assert "rounds run one after another" in alone.text(pieces=False)
    path = tmp_path / "joined.schedule"
    joined.save(path)
    out = subprocess.run([sys.executable, "-m", "loadplan.cli", "schedule", "show", str(path)],
                         capture_output=True, text=True, check=True).stdout
    assert out == text


def test_refusals_say_why(tp2):
    metadata, plans = tp2
    rows = [{m.name: shard_box(m.shape, 0, i, 2) if m.shape and m.shape[0] >= 2 else None
             for m in metadata} for i in range(2)]
    with pytest.raises(loadplan.TransferError, match="no sender holds it whole") as e:
        _build("sliced", metadata, plans, rows)
    assert e.value.code_name == "invalid_argument"
    with pytest.raises(loadplan.TransferError, match="but the senders hold only") as e:
        _build("m_to_n", metadata, plans, rows[:1])
    with pytest.raises(loadplan.TransferError, match="not a schedule file") as e:
        Schedule.from_bytes(b"LOADPLAN" + bytes(40))
    assert e.value.code_name == "invalid_plan"
    with pytest.raises(ValueError, match="unknown engine 'fast'"):
        _build("fast", metadata, plans, rows)


def test_shard_box_cuts_as_torch_chunk():
    assert shard_box((10, 4), 0, 0, 4) == ((0, 3), (0, 4))
    assert shard_box((10, 4), 0, 3, 4) == ((9, 10), (0, 4))
    assert shard_box((2, 4), 0, 3, 4) is None
    assert shard_box((4, 6), 1, 1, 2) == ((0, 4), (3, 6))


def test_arguments_are_checked_before_any_rank_waits(tmp_path):
    model, metadata = llama.make(tp_rank=0, tp_size=1)
    plan = loadplan.plan_loads(model, metadata)
    init = f"file://{tmp_path}/store"
    with pytest.raises(ValueError, match="rank 0 is a sender"):
        loadplan.Receiver(model, plan, rank=0, world_size=2, num_senders=1, init_method=init)
    with pytest.raises(ValueError, match="unknown backend 'mpi'"):
        loadplan.Sender(metadata, rank=0, world_size=2, num_senders=1, backend="mpi",
                        init_method=init)
    with pytest.raises(ValueError, match="the gloo backend moves CPU tensors"):
        loadplan.Sender(metadata, rank=0, world_size=2, num_senders=1, device="cuda:0",
                        init_method=init)
    with pytest.raises(ValueError, match="give group=, store= or init_method="):
        loadplan.Sender(metadata, rank=0, world_size=2, num_senders=1)
    with pytest.raises(ValueError, match="which metadata does not declare"):
        loadplan.Sender(metadata, holdings={"nope": None}, rank=0, world_size=2, num_senders=1,
                        init_method=init)


def _on_two_threads(run, errors: list[BaseException]) -> None:
    """Runs ``run("sender")`` and ``run("receiver")`` on two threads; each
    puts what it raised into ``errors``, which must stay empty."""
    threads = [threading.Thread(target=run, args=(r,)) for r in ("sender", "receiver")]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=60)
    assert not errors, errors


def test_a_sender_and_a_receiver_on_two_threads():
    """Rank 0 holds the checkpoint, rank 1 is a TP=1 fp8 Llama with
    fallbacks; a HashStore in memory for the rendezvous. The sender reads
    (name, tensor) pairs as a WeightSource yields them, with names it does
    not hold among them; each end times a link probe."""
    model, metadata = fp8.make(tp_rank=0, tp_size=1)
    reference, _ = fp8.make(tp_rank=0, tp_size=1)
    copy_bytes(reference, model)
    plan = loadplan.plan_loads(model, metadata)
    store = dist.HashStore()
    weights = dict(random_weights(metadata, 3))
    ends: dict[str, object] = {}
    errors: list[BaseException] = []

    def run(role: str) -> None:
        try:
            common = dict(world_size=2, num_senders=1, store=store, engine="m_to_n",
                          name="threads", timeout=20.0, num_threads=1)
            if role == "sender":
                end = loadplan.Sender(metadata, rank=0, **common)
                pairs = iter([("not.held", torch.zeros(1)), *weights.items()])
                ends["sender_stats"] = end.send(pairs)
            else:
                end = loadplan.Receiver(model, plan, rank=1, **common)
                ends["receiver_stats"] = end.receive()
            ends[role] = end
        except BaseException as e:  # surfaced below
            errors.append(e)

    _on_two_threads(run, errors)
    with torch.no_grad():
        reference.load_weights([(n, t.clone()) for n, t in weights.items()])
    ours = model_tensors(model)
    for name, t in model_tensors(reference).items():
        assert first_difference(name, t, ours[name], 0) is None
    needed = sum(e.nbytes for e in plan.entries.values())
    assert ends["receiver_stats"].bytes_received == needed
    assert ends["sender_stats"].bytes_sent == needed
    assert ends["receiver_stats"].bytes_in_place + ends["receiver_stats"].bytes_staged == needed
    for role in ("sender", "receiver"):
        stats = ends[f"{role}_stats"]
        assert stats.probe_bytes == needed and stats.probe_seconds > 0
        assert stats.over_probe == stats.seconds / stats.probe_seconds
        assert f"over_probe={stats.over_probe:.2f}" in stats.line()
        # Small pieces travel together: far fewer messages than names.
        names = sum(1 for e in plan.entries.values() if e.kind != "unneeded")
        assert 0 < stats.messages_sent + stats.messages_received < names / 4
    assert set(ends["receiver"].fallbacks) == {
        n for n, e in plan.entries.items() if e.kind == "fallback"}
    for role in ("sender", "receiver"):
        ends[role].close()


def test_pairs_a_sender_cannot_send_fail_every_rank():
    """A sender reading pairs: a name twice, a name missing and pairs that
    raise each fail the update on both ranks, naming what was wrong."""
    model, metadata = llama.make(tp_rank=0, tp_size=1)
    plan = loadplan.plan_loads(model, metadata)
    store = dist.HashStore()
    weights = list(random_weights(metadata, 4))
    before = {n: t.clone() for n, t in model_tensors(model).items()}

    def raising():
        yield weights[0]
        raise OSError("the disk went away")

    cases = [
        (iter([weights[0], *weights]), f"yields {weights[0][0]!r} twice"),
        (iter(weights[1:]), f"lacks 1 names this rank holds, e.g. [{weights[0][0]!r}]"),
        (raising(), "could not read its tensors from Source: OSError: the disk went away"),
    ]
    seen: dict[str, list[str]] = {"sender": [], "receiver": []}
    errors: list[BaseException] = []

    def run(role: str) -> None:
        try:
            common = dict(world_size=2, num_senders=1, store=store, engine="m_to_n",
                          name="pairs", timeout=20.0, num_threads=1, atomic=True) \
                if role == "receiver" else dict(world_size=2, num_senders=1, store=store,
                                                engine="m_to_n", name="pairs", timeout=20.0,
                                                num_threads=1)
            end = (loadplan.Sender(metadata, rank=0, **common) if role == "sender"
                   else loadplan.Receiver(model, plan, rank=1, **common))
            with end:
                for pairs, _ in cases:
                    try:
                        if role == "sender":
                            end.send(pairs, source="Source")
                        else:
                            end.receive()
                    except Exception as e:
                        seen[role].append(str(e))
        except BaseException as e:  # surfaced below
            errors.append(e)

    _on_two_threads(run, errors)
    for role in ("sender", "receiver"):
        assert len(seen[role]) == len(cases), seen[role]
        for message, (_, expected) in zip(seen[role], cases):
            assert expected in message, (role, message)
    for name, t in model_tensors(model).items():
        assert torch.equal(t.view(torch.uint8), before[name].view(torch.uint8)), name

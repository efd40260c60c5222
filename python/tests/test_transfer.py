"""Transfers between processes over Gloo: ``loadplan.Sender`` and
``loadplan.Receiver``.

Each test launches its ranks (3 to 6 processes on loopback, each bounded in
time): trainer ranks hold replicas, TP shards, FSDP row shards or expert
subsets of random weights; inference ranks hold TP (or expert-parallel)
models with their plans. After every update each receiver's model must be
byte-equal to a reference model that ran ``load_weights`` on the same
weights, and the bytes counted on the wire must be exactly what the
receivers' plans need (sliced, m_to_n) or the receivers times the model
(full). Rendezvous goes through a torch FileStore, a TCPStore, a process
group and an init_method, one each. A sender killed in the middle of an
update must fail every receiver within 2 s (the dead peer is noticed, not
timed out), and a new Sender in a new process then updates them.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
from math import prod
from pathlib import Path

import pytest

from loadplan.transfer import free_port

TESTS = Path(__file__).resolve().parent
RANK_TIMEOUT = 120.0  # seconds a launch may take, all ranks together

# What each scenario's ranks do; ranks 0..senders-1 send.
SCENARIOS: dict[str, dict] = {
    # Llama-style with fp8 weights, 0-dim scales and fallbacks.
    "fp8_1_to_2": dict(model="fp8", sizes={}, senders=1, receivers=2, layout="replica",
                       engines=["full", "sliced", "m_to_n"], rendezvous="file_store"),
    "llama_tp2_to_tp4": dict(model="llama", sizes={}, senders=2, receivers=4, layout="tp",
                             engines=["full", "sliced", "m_to_n"], rendezvous="tcp_store"),
    "llama_fsdp4_to_2": dict(model="llama", sizes={}, senders=4, receivers=2, layout="fsdp",
                             engines=["full", "m_to_n", "sliced"], rendezvous="group",
                             staging_cap=1024),
    "moe_ep_2_to_2": dict(model="qwen2_moe", sizes=dict(enable_expert_parallel=True),
                          senders=2, receivers=2, layout="ep", engines=["sliced", "m_to_n"],
                          rendezvous="tcp_store"),
}



def test_free_ports_are_below_the_ephemeral_range_and_differ():
    from loadplan.transfer.rendezvous import _ephemeral_range

    lo, _ = _ephemeral_range()
    ports = [free_port() for _ in range(20)]
    assert len(set(ports)) == 20
    assert all(1024 <= p < lo for p in ports)
    with socket.socket() as s:  # free when handed out
        s.bind(("127.0.0.1", ports[-1]))

# One launch runs several scenarios on the same processes (a process's
# start, torch's import and its first plan cost seconds each on a busy
# machine); ranks past a scenario's size sit it out.
LAUNCHES: dict[str, tuple[int, list[str]]] = {
    "three": (3, ["fp8_1_to_2", "failures"]),
    "six": (6, ["llama_tp2_to_tp4", "llama_fsdp4_to_2", "moe_ep_2_to_2"]),
}


def _rank_env() -> dict[str, str]:
    """The environment of a rank's process: one thread, this folder importable."""
    return dict(os.environ, OMP_NUM_THREADS="1", PYTHONPATH=str(TESTS) + os.pathsep +
                os.environ.get("PYTHONPATH", ""))


def launch_ranks(world: int, code: str, tmp_path: Path, label: str) -> list[dict]:
    """Runs ``code`` (Python with ``{rank}`` in it) in ``world`` processes,
    rank by rank, and returns each rank's ``rank<r>.json`` in ``tmp_path``;
    fails on a timeout or a crash."""
    env = _rank_env()
    procs = [subprocess.Popen([sys.executable, "-c", code.format(rank=rank)], env=env,
                              stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
             for rank in range(world)]
    deadline = time.monotonic() + RANK_TIMEOUT
    outputs = [""] * world
    timed_out = False
    for rank, p in enumerate(procs):
        try:
            out, _ = p.communicate(timeout=max(deadline - time.monotonic(), 0.1))
            outputs[rank] = out.decode(errors="replace")
        except subprocess.TimeoutExpired:
            timed_out = True
    if timed_out:
        for p in procs:
            p.kill()
        for rank, p in enumerate(procs):
            out, _ = p.communicate()
            outputs[rank] = outputs[rank] or out.decode(errors="replace")
    failed = [r for r, p in enumerate(procs) if p.returncode != 0]
    if timed_out or failed:
        logs = "\n".join(f"--- rank {r}\n{outputs[r][-3000:]}" for r in range(world))
        pytest.fail(f"{label}: {'timed out' if timed_out else f'ranks {failed} failed'}\n{logs}")
    return [json.loads((tmp_path / f"rank{r}.json").read_text()) for r in range(world)]


def _launch(launch: str, tmp_path: Path) -> dict[str, list[dict]]:
    """Runs ``launch``'s scenarios on its ranks and returns, per scenario,
    each taking rank's result."""
    world, names = LAUNCHES[launch]
    ports = [free_port() for _ in names]
    code = (f"import test_transfer as t; t._rank_main({names!r}, {{rank}}, {world}, "
            f"{str(tmp_path)!r}, {ports!r})")
    per_rank = launch_ranks(world, code, tmp_path, launch)
    return {n: [r[n] for r in per_rank if n in r] for n in names}


# ---------------------------------------------------------------------------
# What each rank runs (in its own process)


def _holdings(layout: str, metadata: list, senders: int, index: int) -> dict:
    """What trainer rank ``index`` of ``senders`` holds of each tensor."""
    from loadplan.transfer import shard_box

    out = {}
    for m in metadata:
        name, shape = m.name, m.shape
        if layout == "replica" or not shape:
            out[name] = None
        elif layout == "fsdp":
            box = shard_box(shape, 0, index, senders)
            if box is not None:
                out[name] = box
        elif layout == "tp":
            # Megatron: column-parallel rows, row-parallel columns; the
            # embeddings (whose vocab the engine pads otherwise) and norms
            # replicated.
            dim = None
            if any(p in name for p in ("q_proj", "k_proj", "v_proj", "gate_proj", "up_proj")):
                dim = 0
            elif any(p in name for p in ("o_proj", "down_proj")) and len(shape) == 2:
                dim = 1
            out[name] = None if dim is None else shard_box(shape, dim, index, senders)
        elif layout == "ep":
            if ".experts." in name:
                expert = int(name.split(".experts.")[1].split(".")[0])
                if expert % senders == index:
                    out[name] = None
            else:
                out[name] = None
    return out


def _part(t, box):
    if box is None:
        return t
    return t[tuple(slice(a, b) for a, b in box)].contiguous()


def _rendezvous(kind: str, rank: int, world: int, tmp: str, port: int) -> dict:
    import datetime

    import torch.distributed as dist

    # The ranks start at once and each imports torch first: on a busy
    # machine the last can reach the store long after the first.
    timeout = datetime.timedelta(seconds=RANK_TIMEOUT)
    os.makedirs(tmp, exist_ok=True)
    if kind == "file_store":
        return {"store": dist.FileStore(f"{tmp}/store", world)}
    if kind == "tcp_store":
        return {"store": dist.TCPStore("127.0.0.1", port, world, rank == 0, timeout=timeout)}
    if kind == "group":
        dist.init_process_group("gloo", init_method=f"file://{tmp}/group", rank=rank,
                                world_size=world, timeout=timeout)
        return {"group": True}
    return {"init_method": f"tcp://127.0.0.1:{port}"}


def _model(sc: dict, tp_rank: int, tp_size: int):
    import importlib

    make = importlib.import_module(f"loadplan.examples.{sc['model']}").make
    return make(tp_rank=tp_rank, tp_size=tp_size, **sc["sizes"])


def _mismatch(reference, model) -> str | None:
    """The first tensor of ``model`` whose bytes differ from ``reference``'s."""
    from loadplan.verification import first_difference, model_tensors

    ours = model_tensors(model)
    for name, t in model_tensors(reference).items():
        m = first_difference(name, t, ours[name], 0)
        if m is not None:
            return str(m)
    return None


def _snapshot(model) -> dict:
    from loadplan.verification import model_tensors

    return {name: t.detach().clone() for name, t in model_tensors(model).items()}


def _rank_main(names: list[str], rank: int, world: int, tmp: str, ports: list[int]) -> None:
    import torch

    torch.set_num_threads(1)
    results = {}
    for name, port in zip(names, ports):
        size = 3 if name == "failures" else SCENARIOS[name]["senders"] + SCENARIOS[name]["receivers"]
        if rank >= size:
            continue
        run = _run_failures if name == "failures" else _run_scenario
        results[name] = run(name, rank, size, f"{tmp}/{name}", port)
    (Path(tmp) / f"rank{rank}.json").write_text(json.dumps(results))
    # Tearing torch down takes seconds on a busy machine; the results are out.
    sys.stdout.flush()
    os._exit(0)


def _run_scenario(name: str, rank: int, world: int, tmp: str, port: int) -> dict:
    import torch

    import loadplan
    from loadplan.verification import copy_bytes, random_weights

    sc = SCENARIOS[name]
    senders, receivers = sc["senders"], sc["receivers"]
    meet = _rendezvous(sc["rendezvous"], rank, world, tmp, port)
    common = dict(rank=None if "group" in meet else rank,
                  world_size=None if "group" in meet else world, num_senders=senders,
                  timeout=30.0, num_threads=1, staging_cap=sc.get("staging_cap", 64 << 20),
                  **meet)
    _, metadata = _model(sc, 0, 1)
    result: dict = {"role": "sender" if rank < senders else "receiver", "engines": {}}
    if rank < senders:
        holdings = _holdings(sc["layout"], metadata, senders, rank)
    else:
        tp_rank = rank - senders
        reference, _ = _model(sc, tp_rank, receivers)
        model, _ = _model(sc, tp_rank, receivers)
        copy_bytes(reference, model)
        plan = loadplan.plan_loads(model, metadata)
        result["needed"] = sum(e.nbytes for e in plan.entries.values())
        result["model_bytes"] = sum(m.dtype.itemsize * prod(m.shape) for m in metadata)
        result["fallbacks"] = sum(e.kind == "fallback" for e in plan.entries.values())
        result["converting"] = sorted(
            n for n, e in plan.entries.items()
            if e.kind == "direct" and any(w.convert_to is not None for w in e.writes))
    for engine in sc["engines"]:
        out = result["engines"][engine] = {"bytes": 0, "errors": [], "mismatch": None}
        try:
            if rank < senders:
                end = loadplan.Sender(metadata, holdings=holdings, engine=engine, **common)
            else:
                end = loadplan.Receiver(model, plan, engine=engine, **common)
        except loadplan.TransferError as e:
            out["errors"].append(str(e))
            continue
        with end:
            for seed in (11, 12):
                weights = dict(random_weights(metadata, seed))
                if rank < senders:
                    stats = end.send({n: _part(weights[n], b) for n, b in holdings.items()})
                    out["bytes"] += stats.bytes_sent
                else:
                    stats = end.receive()
                    with torch.no_grad():
                        reference.load_weights([(n, t.clone()) for n, t in weights.items()])
                    out["bytes"] += stats.bytes_received
                    out["in_place"] = stats.bytes_in_place
                    out["mismatch"] = out["mismatch"] or _mismatch(reference, model)
            out["summary"] = end.schedule.summary.bytes_moved
    return result


def _run_failures(name: str, rank: int, world: int, tmp: str, port: int) -> dict:
    """1 sender, 2 atomic receivers, in rounds: the sender fails at round 1,
    then sends a wrong tensor, then a good update."""
    import torch

    import loadplan
    from loadplan.verification import copy_bytes, random_weights

    sc = dict(model="llama", sizes={})
    meet = _rendezvous("init_method", rank, world, tmp, port)
    _, metadata = _model(sc, 0, 1)
    common = dict(rank=rank, world_size=world, num_senders=1, engine="m_to_n", timeout=30.0,
                  num_threads=1, staging_cap=512, **meet)
    weights = dict(random_weights(metadata, 5))
    result: dict = {"errors": []}
    if rank == 0:
        end = loadplan.Sender(metadata, debug_fail_round=1, **common)
    else:
        reference, _ = _model(sc, rank - 1, 2)
        model, _ = _model(sc, rank - 1, 2)
        copy_bytes(reference, model)
        plan = loadplan.plan_loads(model, metadata)
        end = loadplan.Receiver(model, plan, atomic=True, **common)
        before = _snapshot(model)
    for attempt in ("injected", "bad input"):
        try:
            if rank == 0:
                sent = dict(weights)
                if attempt == "bad input":
                    sent["model.norm.weight"] = sent["model.norm.weight"].float()
                end.send(sent)
            else:
                end.receive()
            result["errors"].append(None)
        except (loadplan.TransferError, ValueError) as e:
            result["errors"].append(f"{type(e).__name__}: {e}")
        if rank > 0:
            after = _snapshot(model)
            result.setdefault("unchanged", []).append(
                all(torch.equal(before[n].view(torch.uint8), after[n].view(torch.uint8))
                    for n in before))
    # The communicator still works: a good update (the hook fired once).
    if rank == 0:
        end.send(weights)
    else:
        end.receive()
        with torch.no_grad():
            reference.load_weights([(n, t.clone()) for n, t in weights.items()])
        result["mismatch"] = _mismatch(reference, model)
    end.close()
    return result


# A sender killed mid-update: one sender of a Llama of 38 MB, two atomic
# receivers, a 30 s timeout, 2 KiB rounds (thousands of them: the update
# takes a third of a second on an idle machine, seconds on a busy one). The
# test kills the sender 50 ms into the update, then a new sender process
# and the receivers make a new communicator (rounds of the default cap) and
# update again.
DEAD_SENDER = dict(model="llama", sizes=dict(vocab_size=1024, hidden_size=512,
                                             intermediate_size=1024, num_layers=8, num_heads=8,
                                             num_kv_heads=4))
DEAD_SENDER_TIMEOUT = 30.0


def _dead_sender_main(role: str, rank: int, tmp: str) -> None:
    """``role``: "doomed" (rank 0 until killed), "replacement" (rank 0 of
    the second communicator) or "receiver" (ranks 1 and 2, both
    communicators)."""
    import torch

    import loadplan
    from loadplan.verification import copy_bytes, random_weights

    torch.set_num_threads(1)
    _, metadata = _model(DEAD_SENDER, 0, 1)

    def common(name: str, staging_cap: int) -> dict:
        # A name per communicator: the new sender's process counts its
        # endpoints afresh, the receivers' do not.
        return dict(rank=rank, world_size=3, num_senders=1, engine="m_to_n", num_threads=1,
                    timeout=DEAD_SENDER_TIMEOUT, staging_cap=staging_cap, name=name,
                    init_method=f"file://{tmp}/{name}")

    first, second = common("first", 2 << 10), common("second", 64 << 20)
    if role == "doomed":
        weights = dict(random_weights(metadata, 21))
        with loadplan.Sender(metadata, **first) as sender:
            # Making the endpoints ends with an agreement of all ranks: the
            # receivers are in the update as soon as this rank is.
            Path(f"{tmp}/sending").touch()
            sender.send(weights)
        os._exit(1)  # not killed: the test says so
    if role == "replacement":
        with loadplan.Sender(metadata, **second) as sender:
            sender.send(dict(random_weights(metadata, 22)))
        os._exit(0)
    reference, _ = _model(DEAD_SENDER, rank - 1, 2)
    model, _ = _model(DEAD_SENDER, rank - 1, 2)
    copy_bytes(reference, model)
    plan = loadplan.plan_loads(model, metadata)
    result: dict = {"error": None}
    with loadplan.Receiver(model, plan, atomic=True, **first) as receiver:
        try:
            receiver.receive()
        except loadplan.TransferError as e:
            result["failed_at"] = time.monotonic()
            result["error"] = str(e)
    # Atomic: the model is as it was, byte for byte.
    result["unchanged"] = _mismatch(reference, model) is None
    with loadplan.Receiver(model, plan, atomic=True, **second) as receiver:
        receiver.receive()
    with torch.no_grad():
        reference.load_weights(list(random_weights(metadata, 22)))
    mismatch = _mismatch(reference, model)
    result["mismatch"] = None if mismatch is None else str(mismatch)
    Path(f"{tmp}/rank{rank}.json").write_text(json.dumps(result))
    sys.stdout.flush()
    os._exit(0)


def _launch_dead_sender(tmp_path: Path) -> tuple[float, list[dict], int]:
    """Runs the dead-sender ranks, kills the sender 50 ms into its update and
    starts its replacement; returns when it killed it, each receiver's
    result and the killed process's return code. Fails on a timeout or a
    crash."""
    env = _rank_env()

    def start(role: str, rank: int) -> subprocess.Popen:
        code = (f"import test_transfer as t; "
                f"t._dead_sender_main({role!r}, {rank}, {str(tmp_path)!r})")
        return subprocess.Popen([sys.executable, "-c", code], env=env,
                                stdout=subprocess.PIPE, stderr=subprocess.STDOUT)

    procs = [start("doomed", 0), start("receiver", 1), start("receiver", 2)]
    deadline = time.monotonic() + RANK_TIMEOUT
    killed_at = None
    while time.monotonic() < deadline and procs[0].poll() is None:
        if (tmp_path / "sending").exists():
            time.sleep(0.05)
            killed_at = time.monotonic()
            procs[0].send_signal(signal.SIGKILL)
            procs.append(start("replacement", 0))
            break
        time.sleep(0.005)
    outputs = []
    for p in procs:
        try:
            out, _ = p.communicate(timeout=max(deadline - time.monotonic(), 0.1))
        except subprocess.TimeoutExpired:
            p.kill()
            out, _ = p.communicate()
        outputs.append(out.decode(errors="replace"))
    failed = [i for i, p in enumerate(procs) if i > 0 and p.returncode != 0]
    if killed_at is None or failed:
        logs = "\n".join(f"--- process {i}\n{o[-3000:]}" for i, o in enumerate(outputs))
        why = "the sender never began its update" if killed_at is None else \
            f"processes {failed} failed or timed out"
        pytest.fail(f"dead sender: {why}\n{logs}")
    results = [json.loads((tmp_path / f"rank{r}.json").read_text()) for r in (1, 2)]
    return killed_at, results, procs[0].returncode


# ---------------------------------------------------------------------------
# The tests


@pytest.fixture(scope="module")
def launched(tmp_path_factory) -> dict[str, dict[str, list[dict]]]:
    """Each launch's results, launched once for the module, on first use."""
    cache: dict[str, dict[str, list[dict]]] = {}

    def get(launch: str) -> dict[str, list[dict]]:
        if launch not in cache:
            cache[launch] = _launch(launch, tmp_path_factory.mktemp(launch))
        return cache[launch]

    return get


def _launch_of(name: str) -> str:
    return next(k for k, (_, names) in LAUNCHES.items() if name in names)


@pytest.mark.parametrize("name", list(SCENARIOS))
def test_receivers_match_load_weights_and_move_what_they_need(name: str, launched):
    sc = SCENARIOS[name]
    results = launched(_launch_of(name))[name]
    assert len(results) == sc["senders"] + sc["receivers"]
    senders = [r for r in results if r["role"] == "sender"]
    receivers = [r for r in results if r["role"] == "receiver"]
    needed = sum(r["needed"] for r in receivers)
    model_bytes = receivers[0]["model_bytes"]
    assert needed < len(receivers) * model_bytes
    for engine in sc["engines"]:
        if name == "llama_fsdp4_to_2" and engine == "sliced":
            # No FSDP row shard holds a receiver's column block whole: every
            # rank gets the same refusal.
            for r in results:
                assert len(r["engines"][engine]["errors"]) == 1
                assert "but no sender holds it whole" in r["engines"][engine]["errors"][0]
            continue
        for r in results:
            assert r["engines"][engine]["errors"] == [], r["engines"][engine]["errors"]
        for r in receivers:
            assert r["engines"][engine]["mismatch"] is None, (engine, r["engines"][engine])
        expected = len(receivers) * model_bytes if engine == "full" else needed
        # Two updates each: the bytes on the wire, on both ends.
        assert sum(r["engines"][engine]["bytes"] for r in receivers) == 2 * expected, engine
        assert sum(r["engines"][engine]["bytes"] for r in senders) == 2 * expected, engine
        assert receivers[0]["engines"][engine]["summary"] == expected
    if name == "fp8_1_to_2":
        assert all(r["fallbacks"] > 0 for r in receivers)
        # A bf16-sent name into an fp8 parameter: a write that converts as
        # the receiver scatters it; the wire carries its bf16 bytes (the
        # counts above are of the plans' boxes in the sent dtype).
        assert all(r["converting"] == ["model.layers.0.mlp.down_proj.weight"]
                   for r in receivers)


def test_a_failed_update_fails_every_rank_and_leaves_atomic_receivers(launched):
    results = launched("three")["failures"]
    injected = [r["errors"][0] for r in results]
    bad = [r["errors"][1] for r in results]
    for e in injected:
        assert e is not None and "rank 0 (sender 0) failed the update: debug_fail_round: this " \
            "rank failed on purpose at round 1" in e, injected
    # The sender raises its own ValueError; the receivers get its message.
    assert bad[0].startswith("ValueError: load plan: 'model.norm.weight' is torch.float32")
    for e in bad[1:]:
        assert e.startswith("TransferError") and "rank 0 (sender 0) refused the update: load " \
            "plan: 'model.norm.weight' is torch.float32" in e, bad
    for r in results[1:]:
        assert r["unchanged"] == [True, True]
        assert r["mismatch"] is None


def test_a_sender_killed_mid_update_fails_every_receiver_at_once(tmp_path):
    killed_at, results, code = _launch_dead_sender(tmp_path)
    assert code == -signal.SIGKILL, "the sender finished its update before the kill"
    for r in results:
        assert r["error"] is not None, "a receiver's update succeeded without its sender"
        assert "rank 0 is gone: its connection " in r["error"], r["error"]
        # Noticed when the socket closed, not at the 30 s timeout.
        assert r["failed_at"] - killed_at < 2.0, (r["failed_at"] - killed_at, r["error"])
        assert r["unchanged"], "an atomic receiver's model changed"
        assert r["mismatch"] is None, r["mismatch"]

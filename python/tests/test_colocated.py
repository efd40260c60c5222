"""Colocated transfers: trainer ranks and inference ranks on one machine,
each receiver reading the pieces it needs straight from the senders'
shared memory (Sender/Receiver with ``colocated=True``).

Each rank is a process, as in test_transfer. Receivers build the example
models that test_transfer uses, through their own classes, and after every
update each equals a second copy of the model given the same weights by
``load_weights``, byte for byte. The trainer keeps its tensors in shared
memory and updates them in place between updates, as an optimizer does;
once it replaces a tensor with a new one (a reallocated buffer), which the
receivers must notice rather than read the old one.
"""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path

import pytest

from loadplan.transfer import free_port
from test_transfer import _holdings, _mismatch, _model, _part, _snapshot, launch_ranks

# Each scenario: 2 trainer ranks, 2 inference ranks (TP=2).
SCENARIOS: dict[str, dict] = {
    # Row shards of every tensor (FSDP-like): boxes cut across them.
    "llama_rows_m_to_n": dict(model="llama", sizes={}, layout="fsdp", engine="m_to_n",
                              atomic=False),
    # Megatron TP shards, atomic receivers (staged, then written).
    "llama_tp_sliced_atomic": dict(model="llama", sizes={}, layout="tp", engine="sliced",
                                   atomic=True),
    # Experts split between the trainer ranks; the engine with EP. The
    # trainer sends with share=True and its reallocated buffer is a plain
    # tensor: the sender moves it into shared memory itself.
    "moe_ep_m_to_n": dict(model="qwen2_moe", sizes=dict(enable_expert_parallel=True),
                          layout="ep", engine="m_to_n", atomic=False, share=True),
}
SEEDS = (31, 32, 33)  # the last after the trainer reallocated a tensor


def _shared_maps() -> int:
    """This process's shared mappings of /dev/shm files (torch's shared
    memory)."""
    with open("/proc/self/maps") as f:
        return sum(1 for line in f
                   if len(line.split()) > 5 and line.split()[1][3] == "s"
                   and "/dev/shm/" in line)


def _changed(model, snapshot: dict) -> list[str]:
    """The names of ``model``'s tensors whose bytes differ from ``snapshot``."""
    import torch

    return [n for n, t in _snapshot(model).items()
            if not t.view(-1).view(torch.uint8).equal(snapshot[n].view(-1).view(torch.uint8))]


def _common(rank: int, tmp: str, port: int, **extra) -> dict:
    return dict(rank=rank, world_size=4, num_senders=2, timeout=30.0, num_threads=1,
                init_method=f"tcp://127.0.0.1:{port}", colocated=True, **extra)


def _run_scenario(name: str, rank: int, tmp: str, port: int) -> dict:
    import torch

    import loadplan
    from loadplan.transfer import share_memory
    from loadplan.verification import copy_bytes, random_weights

    sc = SCENARIOS[name]
    _, metadata = _model(sc, 0, 1)
    common = _common(rank, tmp, port, engine=sc["engine"])
    result: dict = {"updates": []}
    if rank < 2:
        holdings = _holdings(sc["layout"], metadata, 2, rank)
        weights = dict(random_weights(metadata, SEEDS[0]))
        held = share_memory({n: _part(weights[n], b) for n, b in holdings.items()})
        with loadplan.Sender(metadata, holdings=holdings, **common) as sender:
            for k, seed in enumerate(SEEDS):
                if k:
                    weights = dict(random_weights(metadata, seed))
                    for n, b in holdings.items():
                        if k == 2 and n == "model.embed_tokens.weight":
                            # A new buffer, not the one the receivers mapped.
                            held[n] = _part(weights[n], b).clone()
                            if not sc.get("share"):
                                share_memory([held[n]])
                        else:
                            held[n].copy_(_part(weights[n], b))
                shared = "model.embed_tokens.weight" not in held or \
                    held["model.embed_tokens.weight"].is_shared()
                stats = sender.send(held, share=sc.get("share", False))
                result["updates"].append(dict(
                    messages=stats.messages_sent, bytes_sent=stats.bytes_sent,
                    shared_before=shared, all_shared=all(t.is_shared() for t in held.values())))
        return result
    tp_rank = rank - 2
    reference, _ = _model(sc, tp_rank, 2)
    model, _ = _model(sc, tp_rank, 2)
    copy_bytes(reference, model)
    plan = loadplan.plan_loads(model, metadata)
    result["needed"] = sum(e.nbytes for e in plan.entries.values())
    before = _shared_maps()
    with loadplan.Receiver(model, plan, atomic=sc["atomic"], **common) as receiver:
        for seed in SEEDS:
            stats = receiver.receive()
            with torch.no_grad():
                reference.load_weights(list(random_weights(metadata, seed)))
            result["updates"].append(dict(
                mismatch=_mismatch(reference, model), mappings=stats.mappings,
                bytes=stats.bytes_received + stats.bytes_local,
                staged=stats.bytes_staged, in_place=stats.bytes_in_place,
                messages=stats.messages_received, seen=_shared_maps() - before))
    result["left"] = _shared_maps() - before
    return result


def _run_failures(rank: int, tmp: str, port: int) -> dict:
    """1 sender, 2 atomic receivers (ranks 0..2 of 3): a tensor not in
    shared memory, a good update, then the sender exits while the receivers
    hold its mappings."""
    import torch

    import loadplan
    from loadplan.transfer import share_memory
    from loadplan.verification import copy_bytes, random_weights

    sc = dict(model="llama", sizes={})
    _, metadata = _model(sc, 0, 1)
    common = dict(rank=rank, world_size=3, num_senders=1, timeout=30.0, num_threads=1,
                  init_method=f"tcp://127.0.0.1:{port}", colocated=True, engine="m_to_n")
    result: dict = {"errors": []}
    if rank == 0:
        weights = dict(random_weights(metadata, 41))
        held = share_memory(dict(weights))
        with loadplan.Sender(metadata, **common) as sender:
            private = dict(held, **{"model.norm.weight": held["model.norm.weight"].clone()})
            try:
                sender.send(private)
            except loadplan.TransferError as e:
                result["errors"].append(str(e))
            sender.send(held)
            (Path(tmp) / "rank0.json").write_text(json.dumps({"failures": result}))
            # Gone while the receivers hold this rank's memory mapped.
            sys.stdout.flush()
            os._exit(0)
    reference, _ = _model(sc, rank - 1, 2)
    model, _ = _model(sc, rank - 1, 2)
    copy_bytes(reference, model)
    plan = loadplan.plan_loads(model, metadata)
    before = _shared_maps()
    with loadplan.Receiver(model, plan, atomic=True, **common) as receiver:
        snapshot = _snapshot(model)
        try:
            receiver.receive()
        except loadplan.TransferError as e:
            result["errors"].append(str(e))
        result["changed"] = _changed(model, snapshot)
        stats = receiver.receive()
        with torch.no_grad():
            reference.load_weights(list(random_weights(metadata, 41)))
        result["mismatch"] = _mismatch(reference, model)
        result["mapped"] = stats.mappings
        snapshot = _snapshot(model)
        start = time.monotonic()
        try:
            receiver.receive()
            result["errors"].append(None)
        except loadplan.TransferError as e:
            result["errors"].append(str(e))
        result["noticed_s"] = time.monotonic() - start
        result["still_mapped"] = receiver.stats.mappings
        result["changed_by_failure"] = _changed(model, snapshot)
    result["left"] = _shared_maps() - before
    return result


def _rank_main(rank: int, world: int, tmp: str, ports: list[int]) -> None:
    import torch

    torch.set_num_threads(1)
    results = {}
    if world == 3:
        results["failures"] = _run_failures(rank, tmp, ports[0])
    else:
        for (name, port) in zip(SCENARIOS, ports):
            results[name] = _run_scenario(name, rank, f"{tmp}/{name}", port)
    (Path(tmp) / f"rank{rank}.json").write_text(json.dumps(results))
    sys.stdout.flush()
    os._exit(0)


@pytest.fixture(scope="module")
def scenarios(tmp_path_factory) -> list[dict]:
    tmp = tmp_path_factory.mktemp("colocated")
    ports = [free_port() for _ in SCENARIOS]
    code = f"import test_colocated as t; t._rank_main({{rank}}, 4, {str(tmp)!r}, {ports!r})"
    return launch_ranks(4, code, tmp, "colocated")


@pytest.mark.parametrize("name", list(SCENARIOS))
def test_receivers_read_the_trainers_memory_and_match_load_weights(name: str, scenarios):
    sc = SCENARIOS[name]
    senders = [r[name] for r in scenarios[:2]]
    receivers = [r[name] for r in scenarios[2:]]
    for r in receivers:
        assert len(r["updates"]) == len(SEEDS)
        for k, u in enumerate(r["updates"]):
            assert u["mismatch"] is None, (k, u["mismatch"])
            # Every byte the plan needs, from the trainers' memory.
            assert u["bytes"] == r["needed"], (k, u)
            assert u[("staged" if sc["atomic"] else "in_place")] == r["needed"]
            assert u[("in_place" if sc["atomic"] else "staged")] == 0
            # The trainer ranks' shared files stay mapped between updates.
            assert u["mappings"] > 0 and u["seen"] >= u["mappings"], u
        # A header from each sender it reads from, and its table only when
        # it changed (the first update, and after the reallocation).
        messages = [u["messages"] for u in r["updates"]]
        assert messages[1] in (1, 2) and messages[0] == messages[2] == 2 * messages[1], messages
        # Closing the receiver unmapped every file it mapped.
        assert r["left"] == 0, r["left"]
    for s in senders:
        # Nothing is sent but the tables' headers and tables.
        assert all(u["bytes_sent"] == 0 for u in s["updates"]), s["updates"]
        assert all(u["all_shared"] for u in s["updates"]), s["updates"]
    if sc.get("share"):
        # The reallocated buffer was private memory until send moved it.
        assert any(not s["updates"][2]["shared_before"] for s in senders), senders


@pytest.fixture(scope="module")
def failures(tmp_path_factory) -> list[dict]:
    tmp = tmp_path_factory.mktemp("colocated_failures")
    code = (f"import test_colocated as t; "
            f"t._rank_main({{rank}}, 3, {str(tmp)!r}, [{free_port()}])")
    return [r["failures"] for r in launch_ranks(3, code, tmp, "colocated failures")]


def test_a_tensor_outside_shared_memory_fails_every_rank_before_any_byte(failures):
    for r in failures:
        assert "held tensor 'model.norm.weight' is not in shared memory" in r["errors"][0], \
            r["errors"][0]
    for r in failures[1:]:
        assert "rank 0 (sender 0) refused the update" in r["errors"][0]
        assert r["changed"] == [], r["changed"]
        assert r["mismatch"] is None, r["mismatch"]
        assert r["mapped"] > 0


def test_a_trainer_gone_fails_every_receiver_and_leaves_no_mapping(failures):
    for r in failures[1:]:
        error = r["errors"][1]
        assert error is not None, "an update succeeded without its sender"
        assert "rank 0" in error and "is gone" in error, error
        assert r["noticed_s"] < 2.0, r["noticed_s"]
        assert r["changed_by_failure"] == [], r["changed_by_failure"]
        # The dead sender's files are unmapped at once, and nothing stays.
        assert r["still_mapped"] == 0
        assert r["left"] == 0, r["left"]

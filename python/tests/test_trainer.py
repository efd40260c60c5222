"""loadplan.trainer without an engine: the metadata entries a source
without vLLM declares, the trainer's init info, and what Trainer.start
refuses before it touches the network. Its updates run end to end in
test_sglang_backend.py (a trainer process where vLLM cannot be imported)
and, under vLLM's interface, in test_vllm_backend.py."""

from __future__ import annotations

import pytest
import torch

from loadplan.trainer import Param, Replicate, Shard, Trainer, TrainerInfo, holdings_of


def test_params_refuse_layouts_that_cannot_be():
    Param("w", torch.bfloat16, (4, 6), owners=(0, 1, 2, 3), mesh_shape=(2, 2),
          placements=(Shard(0), Replicate()))
    for kw, match in [
        (dict(placements=(Shard(0),)), "no owners"),
        (dict(owners=(0, 0)), "distinct"),
        (dict(owners=(0, -1)), "distinct"),
        (dict(owners=(0, 1, 2), mesh_shape=(2, 2)), "does not cover"),
        (dict(owners=(0, 1), placements=(Shard(0), Shard(1))), "2 placements for a 1-D"),
        (dict(owners=(0, 1), placements=(Shard(2),)), "shards dim 2 of a 2-D"),
    ]:
        with pytest.raises(ValueError, match=match):
            Param("w", torch.bfloat16, (4, 6), **kw)
    with pytest.raises(TypeError, match="neither Shard nor Replicate"):
        Param("w", torch.bfloat16, (4, 6), owners=(0, 1), placements=("S0",))
    p = Param("w", torch.bfloat16, [4, 6], owners=[0, 1])
    assert p.shape == (4, 6) and p.owners == (0, 1) and p.mesh_shape == (2,)


def test_holdings_follow_owners_and_placements():
    metadata = [
        Param("a", torch.bfloat16, (4, 6), owners=(0, 1), placements=(Shard(1),)),
        Param("b", torch.bfloat16, (6,)),  # every rank, whole
        Param("c", torch.bfloat16, (2, 2), owners=(1,)),
    ]
    assert holdings_of(metadata, 0, 2, local=True) == {"a": ((0, 4), (0, 3)), "b": None}
    assert holdings_of(metadata, 1, 2, local=True) == {
        "a": ((0, 4), (3, 6)), "b": None, "c": None}
    assert holdings_of(metadata, 0, 2, local=False) == {"a": None, "b": None}


def test_trainer_info_refuses_what_cannot_work():
    ok = dict(rank=0, master_address="127.0.0.1", master_port=29600, world_size=3)
    info = TrainerInfo(**ok)
    assert info.is_sender and info.engine == "m_to_n" and info.atomic
    assert not TrainerInfo(**{**ok, "rank": 1, "num_trainer_ranks": 2}).is_sender
    for bad, match in [({"engine": "broadcast"}, "engine"), ({"num_trainer_ranks": 3}, "worker"),
                       ({"master_port": 0}, "port"), ({"transport": "mpi"}, "transport"),
                       ({"timeout": 0}, "timeout"), ({"rank": 1}, "trainer rank"),
                       ({"quantize_fp8": "*.weight"}, "string"),
                       ({"quantize_block": (128, 0)}, "quantize_block")]:
        with pytest.raises(ValueError, match=match):
            TrainerInfo(**{**ok, **bad})


class _FullOnly:
    metadata = [Param("w", torch.float32, (2,))]

    def iter_full(self):
        yield "w", torch.zeros(2)


def test_start_refuses_a_source_without_the_engines_mode():
    info = dict(rank=0, master_address="127.0.0.1", master_port=29600, world_size=2)
    with pytest.raises(TypeError, match="'m_to_n' sends local shards, but _FullOnly does not "
                                        r"implement iter_local\(\)"):
        Trainer.start(TrainerInfo(**info), client=None, source=_FullOnly())
    with pytest.raises(ValueError, match="needs a weight source"):
        Trainer.start(TrainerInfo(**info, engine="sliced"), client=None)
    # A draft model's update starts with the client's start_draft_weight_update.
    with pytest.raises(TypeError, match=r"start_draft_weight_update\(\); NoneType has none"):
        Trainer.start(TrainerInfo(**info, engine="sliced", draft=True), client=None,
                      source=_FullOnly())


def test_an_engine_that_does_not_start_the_transfer_fails_every_trainer_rank_at_once():
    # Rank 0's client cannot reach the engine at start: rank 1 is told so
    # through the store, instead of waiting for the workers at its first
    # update until the timeout.
    import threading
    import time

    from loadplan.sglang.client import SGLangClient
    from loadplan.transfer import free_port

    info = dict(master_address="127.0.0.1", master_port=free_port(), world_size=3,
                num_trainer_ranks=2, engine="sliced", timeout=60.0)
    # An engine's URL where nothing listens (its server is gone).
    client = SGLangClient.http(f"http://127.0.0.1:{free_port()}", timeout=5)
    errors: dict[int, BaseException] = {}

    def run(rank: int) -> None:
        try:
            trainer = Trainer.start(TrainerInfo(rank=rank, **info), client=client,
                                    source=_FullOnly())
            trainer.send_weights()
        except BaseException as e:  # noqa: BLE001 - what each rank raised
            errors[rank] = e

    t0 = time.perf_counter()
    threads = [threading.Thread(target=run, args=(r,), daemon=True) for r in (1, 0)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    assert time.perf_counter() - t0 < 15
    assert sorted(errors) == [0, 1], errors
    for e in errors.values():
        assert isinstance(e, RuntimeError), repr(e)
        assert "the engine did not start the weight transfer engine: ConnectionError" in str(e)
    assert "told to trainer rank 1 by rank 0" in str(errors[1])

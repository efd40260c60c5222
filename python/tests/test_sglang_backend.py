"""loadplan inside SGLang's weight updates, end to end: a trainer process
(loadplan's trainer engine with ``loadplan.sglang.client.SGLangClient``) and
SGLang TP workers in processes of their own (sglang_harness: SGLang's
classes, its plugins loaded from their entry points, its own
``WeightUpdater`` and ``SchedulerWeightUpdaterManager`` running each
control call), over Gloo.

After each of several updates every parameter and buffer must equal, byte
for byte, a second copy of the model updated by SGLang's own distributed
update (``begin_weight_update``, ``load_weights``, ``end_weight_update``)
and a third freshly loaded from the same weights."""

from __future__ import annotations

import time

import pytest

pytest.importorskip("sglang")

import vllm_harness as h  # noqa: E402

# SGLang's block-fp8 linears take only whole 128-row blocks per rank (4 kv
# heads of 64 at TP=2).
FP8_MODEL = dict(fp8=True, hidden=256, intermediate=256, heads=4, kv_heads=4)
SCENARIOS = {
    "qwen3-tp1-full": dict(family="qwen3", tp=1, engine="full"),
    "qwen3-tp2-sliced": dict(family="qwen3", tp=2, engine="sliced"),
    "qwen3-tp2-m_to_n-sharded": dict(family="qwen3", tp=2, trainers=2, engine="m_to_n",
                                     sharded=True),
    # loadplan.trainer.Trainer where vLLM cannot be imported, from a source
    # that is a plain object with loadplan.trainer's Params.
    "qwen3-tp2-m_to_n-sharded-without-vllm": dict(
        family="qwen3", tp=2, trainers=2, engine="m_to_n", sharded=True,
        trainer_without_vllm=True),
    "qwen3_moe-tp2": dict(family="qwen3_moe", tp=2, engine="sliced"),
    "qwen3_moe-tp2-ep": dict(family="qwen3_moe", tp=2, engine="m_to_n", expert_parallel=True),
    # SGLang steered onto FlashInfer TRT-LLM's bf16 MoE (Blackwell's):
    # experts padded to 128 rows, w1/w3 swapped, rows permuted into blocks
    # at each end_weight_update and restored at each begin_weight_update.
    "qwen3_moe-tp2-fi-trtllm-bf16": dict(family="qwen3_moe", tp=2, engine="sliced",
                                         sglang_moe_runner="flashinfer_trtllm"),
    "qwen3_moe-tp2-ep-fi-trtllm-bf16": dict(family="qwen3_moe", tp=2, engine="m_to_n",
                                            expert_parallel=True,
                                            sglang_moe_runner="flashinfer_trtllm"),
    # Colocated (transport "ipc"): the workers read the trainer ranks'
    # shared memory.
    "qwen3-tp2-m_to_n-sharded-ipc": dict(family="qwen3", tp=2, trainers=2, engine="m_to_n",
                                         sharded=True, transport="ipc"),
    "qwen3_moe-tp2-ep-ipc": dict(family="qwen3_moe", tp=2, engine="m_to_n",
                                 expert_parallel=True, transport="ipc"),
    # The engine serves the block-fp8 checkpoint; the trainer holds bf16
    # and its sender quantizes.
    "qwen3-fp8-from-bf16-trainer": dict(family="qwen3", tp=2, engine="sliced", fp8=True,
                                        model=FP8_MODEL),
}


@pytest.fixture(scope="module")
def models(tmp_path_factory):
    root = tmp_path_factory.mktemp("sglang-models")
    return lambda family, **sizes: h.saved_model(family, str(root), **sizes)


def _cluster(models, tmp_path, family, model=None, **kw) -> h.Cluster:
    spec = h.Spec(family=family, model_dir=models(family, **(model or {})),
                  plan_dir=str(tmp_path / "plans"), timeout=60.0, serving="sglang", **kw)
    return h.Cluster(spec)


@pytest.mark.parametrize("scenario", sorted(SCENARIOS))
def test_updates_equal_sglangs_own(models, tmp_path, scenario):
    cluster = _cluster(models, tmp_path, **SCENARIOS[scenario])
    try:
        assert cluster.trainers == [
            "Trainer" if cluster.spec.trainer_without_vllm
            else "LoadplanTrainerWeightTransferEngine"] * cluster.spec.trainers
        for round_ in (1, 2, 3):
            results = cluster.update(round_)
            assert all(status == "ok" for status, _ in results), results
            assert h.inexact(cluster, round_) == []
        if cluster.spec.sglang_moe_runner == "flashinfer_trtllm":
            # Every fused MoE layer took the path, and its experts are in
            # TRT-LLM's block layout between updates: this rank's experts
            # (4, or 2 with EP), one block of the hidden size (64), the gate
            # and up halves each padded to 128 rows (from 32 or 64).
            experts = 2 if cluster.spec.expert_parallel else 4
            layouts = cluster.workers("moe_layouts")
            assert all(lay == [(True, (experts, 1, 256, 64))] for lay in layouts), layouts
        if cluster.spec.transport == "ipc":
            # Read in place: a header and a table from each trainer rank.
            for plan in cluster.workers("plan"):
                stats = plan["stats"]
                assert stats["mappings"] > 0 and stats["bytes_received"] > 0, stats
                assert stats["messages_received"] <= 2 * cluster.spec.trainers, stats
    finally:
        cluster.close()


def test_ipc_workers_close_their_mappings_when_the_trainer_asks(models, tmp_path):
    # As the vLLM backend's test: a trainer that keeps its tensors sends a
    # header per update once its endpoints settled; after update 3
    # (send_weights(release_mappings=True), carried in the request's
    # group_name) every TP rank closes its mappings, and update 4 asks for
    # the table again.
    cluster = _cluster(models, tmp_path, "qwen3", tp=2, engine="m_to_n", transport="ipc",
                       source_in_place=True)
    try:
        for round_ in (1, 2, 3, 4, 5):
            results = cluster.update(round_, release_mappings=round_ == 3)
            assert all(status == "ok" for status, _ in results), results
            assert h.inexact(cluster, round_) == []
            h.check_mappings_after(cluster, round_, released=3)
    finally:
        cluster.close()


def test_bad_updates_leave_the_model_unchanged(models, tmp_path):
    """A wrong dtype, a wrong shape and a name the model lacks each fail on
    every rank with the cause, leave every tensor as it was, and close
    SGLang's update session: the next update works."""
    cluster = _cluster(models, tmp_path, "qwen3", tp=2, engine="sliced")
    try:
        assert all(s == "ok" for s, _ in cluster.update(1))
        before = cluster.workers("digest")
        for faults, words in ((dict(wrong_dtype={0: "k_proj.weight"}), "torch.float16"),
                              (dict(wrong_shape={0: "down_proj.weight"}), "down_proj.weight"),
                              (dict(variant="unknown_name"), "bogus_proj")):
            results = cluster.update(2, **faults)
            assert all(s == "error" for s, _ in results), (faults, results)
            assert any(words in str(m) for _, m in results), (faults, results)
            # Every TP rank's SGLang call failed with the cause.
            for error in cluster.last_errors():
                assert error is not None and words in error, (faults, error)
                assert "session is closed" in error, error
            assert cluster.workers("digest") == before, faults
        assert all(s == "ok" for s, _ in cluster.update(3))
        assert h.inexact(cluster, 3) == []
    finally:
        cluster.close()


def test_a_trainer_rank_that_dies_leaves_the_model_unchanged(models, tmp_path):
    """Trainer rank 1 dies as an update starts (over the endpoints the
    earlier updates made), and later as it sets up new endpoints: each
    time every TP rank fails the update naming it within 2 s, the model is
    as it was, and a restarted trainer (a new session) updates it again."""
    cluster = _cluster(models, tmp_path, "qwen3", tp=2, trainers=2, engine="m_to_n",
                       sharded=True)
    try:
        # The first update plans; the second makes the endpoints (the
        # workers' plans are new) that the next one uses.
        for round_ in (1, 2):
            assert all(s == "ok" for s, _ in cluster.update(round_))
        before = cluster.workers("digest")
        t0 = time.perf_counter()
        results = cluster.update(3, die_after_s={1: 0.0})
        took = time.perf_counter() - t0
        assert results[0][0] == "error" and "rank 1" in results[0][1], results
        # Noticed from the dead rank's connection, not at the timeout (60 s):
        # about 0.1 s on this machine.
        assert took < 2.0, took
        for error in cluster.last_errors():
            assert error is not None and "rank 1" in error, error
        assert cluster.workers("digest") == before
        cluster.restart_trainers()
        assert all(s == "ok" for s, _ in cluster.update(4))
        assert h.inexact(cluster, 4) == []
        h.dies_in_set_up_is_noticed(cluster, 5, "o_proj.weight")
    finally:
        cluster.close()


def test_a_restarted_engine_reads_its_plan(models, tmp_path):
    """The plans the first engine traced and saved are read back by a new
    one of the same model and layout (both TP ranks), and its updates are
    exact."""
    for run, expected in enumerate(("traced", "read")):
        cluster = _cluster(models, tmp_path, "qwen3_moe", tp=2, engine="sliced")
        try:
            assert all(s == "ok" for s, _ in cluster.update(run + 1))
            plans = cluster.workers("plan")
            assert all(p["how"].startswith(expected) for p in plans), [p["how"] for p in plans]
            assert all(set(p["kinds"].values()) == {"direct"} for p in plans)
            assert h.inexact(cluster, run + 1) == []
        finally:
            cluster.close()

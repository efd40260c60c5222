"""The ``loadplan`` vLLM weight-transfer backend, end to end on real vLLM
model classes: trainer ranks and inference workers in separate processes,
driven through vLLM's own factories and lifecycle (init, then start, update,
finish per update), over Gloo. After every update each worker compares every
parameter and buffer, byte for byte, with two references (vllm_harness.py):
a second copy of its model that vLLM's own reload path updated with the same
weights, and a model freshly loaded from them. Where the two disagree, vLLM's
reload is the one that is wrong, and the backend must equal the fresh load."""

from __future__ import annotations

import re
import time

import pytest

pytest.importorskip("vllm")

import vllm_harness as h  # noqa: E402
from loadplan.vllm.processing import REASON, STEP_REASON  # noqa: E402

# fp8 block quantization wants hidden and intermediate sizes, and each of
# q, k and v, in multiples of 128.
FP8_MODEL = dict(fp8=True, hidden=256, intermediate=256, heads=4, kv_heads=2)

# Families, sizes and layouts (tp: inference workers; trainers: trainer
# ranks, each holding row or column shards when `sharded`).
SCENARIOS = {
    "llama-tp2-sliced": dict(family="llama", tp=2, engine="sliced"),
    "qwen2-tp2-full": dict(family="qwen2", tp=2, engine="full"),
    # Phi3's checkpoint holds qkv_proj and gate_up_proj fused already.
    "phi3-tp2-from-2-sharded-trainers": dict(family="phi3", tp=2, trainers=2, sharded=True),
    "deepseek_v2-mla-moe-tp2-sliced": dict(family="deepseek_v2", tp=2, engine="sliced"),
    # bf16 experts, which the loader copies around vLLM's weight loaders:
    # vLLM's own reload leaves them stale.
    "gpt_oss-bf16": dict(family="gpt_oss"),
    "gpt_oss-bf16-tp2-sliced": dict(family="gpt_oss", tp=2, engine="sliced"),
    "qwen3-full": dict(family="qwen3", engine="full"),
    "qwen3_moe-tp2": dict(family="qwen3_moe", tp=2),
    "qwen3_moe-tp2-expert-parallel": dict(family="qwen3_moe", tp=2, expert_parallel=True),
    # An expert intermediate of 48, which vLLM's CPU experts zero-pad to 64
    # at the first load only: vLLM's own reload raises on it.
    "qwen3_moe-padded-intermediate": dict(family="qwen3_moe", model=dict(intermediate=96),
                                          vllm_reload_fails=True),
    "deepseek_v3-mla-moe": dict(family="deepseek_v3"),
    # A bf16 trainer: e_score_correction_bias goes bf16 into vLLM's fp32
    # parameter, as a write that converts.
    "deepseek_v3-bf16-trainer": dict(family="deepseek_v3", fp32_names=()),
    "mixtral-tp2-from-2-sharded-trainers": dict(family="mixtral", tp=2, trainers=2,
                                                sharded=True),
    # Colocated (transport "ipc"): the workers read the trainer ranks'
    # tensors in their shared memory; row shards (M-to-N), and a MoE model.
    "llama-tp2-ipc-from-2-sharded-trainers": dict(family="llama", tp=2, trainers=2,
                                                  sharded=True, transport="ipc"),
    "qwen3_moe-tp2-ipc": dict(family="qwen3_moe", tp=2, transport="ipc"),
    # An fp8 block-quantized engine fed by a bf16 trainer (quantize_fp8).
    "qwen3-fp8-from-bf16-trainer": dict(family="qwen3", fp8=True, model=FP8_MODEL),
}


# The fallbacks a scenario has (name suffix -> reason); the others have
# none.
EXPECTED_FALLBACKS: dict[str, dict[str, str]] = {}
# The names a scenario's ranks other than the first do not need: gpt-oss's
# loader zeroes the incoming down_proj_bias in place on every TP rank but
# the first (the bias is added once), a constant written while planning.
EXPECTED_UNNEEDED = {"gpt_oss-bf16-tp2-sliced": "mlp.experts.down_proj_bias"}


# Layers reloaded on every update besides MLA's attention (suffixes): the
# CPU experts' first-load padding, loaded as a fresh load processes them.
EXPECTED_RELOADED = {"qwen3_moe-padded-intermediate": ("mlp.experts.routed_experts",)}


@pytest.fixture(scope="module")
def models(tmp_path_factory):
    root = tmp_path_factory.mktemp("models")
    return lambda family, **sizes: h.saved_model(family, str(root), **sizes)


def _spec(models, tmp_path, model=None, **kw) -> h.Spec:
    return h.Spec(model_dir=models(kw["family"], **(model or {})),
                  plan_dir=str(tmp_path / "plans"), timeout=60.0, **kw)


def _ok(results: list) -> None:
    errors = [r for status, r in results if status != "ok"]
    assert not errors, errors


def _exact(cluster: h.Cluster, round_: int, variant: str | None = None) -> None:
    """Every worker's model equals one freshly loaded from round
    ``round_``'s weights, and vLLM's reload of them wherever that equals
    the fresh load (see ``vllm_harness.inexact``)."""
    problems = h.inexact(cluster, round_, variant)
    assert not problems, problems[0]


@pytest.mark.parametrize("name", list(SCENARIOS))
def test_every_update_equals_a_fresh_load_and_vllms_own_reload(models, tmp_path, name):
    spec = _spec(models, tmp_path, **SCENARIOS[name])
    cluster = h.Cluster(spec)
    try:
        for round_ in (1, 2, 3):
            _ok(cluster.update(round_))
            _exact(cluster, round_)
        plans = cluster.workers("plan")
    finally:
        cluster.close()
    for plan in plans:
        # Planned inside the engine, from the declared checkpoint; after the
        # first update only the layers whose processing changes a tensor
        # are reloaded: MLA's attention (W_UK_T, W_UV), and where the
        # scenario says so, MoE layers vLLM pads at the first load.
        assert plan["traced"]
        mla = [p for p in plan["processed"] if p.endswith("mla_attn")]
        others = EXPECTED_RELOADED.get(name, ())
        assert all(p.endswith(("mla_attn", *others)) for p in plan["processed"])
        assert all(any(p.endswith(o) for p in plan["processed"]) for o in others)
        assert bool(mla) == spec.family.startswith("deepseek")
        expected = EXPECTED_FALLBACKS.get(name, {})
        fallbacks = {n: r for n, r in plan["reasons"].items() if plan["kinds"][n] == "fallback"}
        # A reloaded layer's names say so, and, once the first update showed
        # it, which step of its processing keeps it reloaded.
        head, tail = STEP_REASON.split("{step}")
        reloads = {n for n, r in fallbacks.items() for p in plan["processed"]
                   if r.startswith(head.format(module=p)) and r.endswith(tail)
                   and len(r) > len(head.format(module=p)) + len(tail)}
        assert not set(fallbacks.values()) & {REASON.format(module=p)
                                              for p in plan["processed"]}, fallbacks
        assert all(any(n.endswith(k) and r == v for k, v in expected.items()) or n in reloads
                   for n, r in fallbacks.items()), fallbacks
        assert bool(others) == bool(reloads)
        if spec.expert_parallel:  # the other rank's experts
            assert "unneeded" in plan["kinds"].values()
        elif name in EXPECTED_UNNEEDED:
            unneeded = {n for n, k in plan["kinds"].items() if k == "unneeded"}
            zeroed = {n for n in plan["kinds"] if n.endswith(EXPECTED_UNNEEDED[name])}
            assert unneeded == (zeroed if plan["rank"] else set()), unneeded
        if spec.transport == "ipc":
            # Read from the trainer ranks' shared memory: a header and a
            # table from each (the harness's source makes new tensors every
            # round, so every table is new), no data messages.
            stats = plan["stats"]
            assert stats["mappings"] > 0 and stats["bytes_received"] > 0, stats
            assert stats["messages_received"] <= 2 * spec.trainers, stats
        if spec.fp8:
            # The fp8 checkpoint the trainer declared, scales included, all
            # direct: on this CPU build the fp8 layers' processing (the
            # weight prepack's stand-in) leaves each tensor as loaded.
            scales = [n for n in plan["kinds"] if n.endswith("_proj.weight_scale_inv")]
            assert len(scales) == 2 * 7, sorted(plan["kinds"])


def test_an_update_refreshes_the_mtp_draft_with_the_model(models, tmp_path):
    # DeepSeek-V3 with its MTP layer run as vLLM's speculative draft model
    # (DeepSeekMTP, its embedding and LM head the model's, as vLLM's
    # proposer shares them). Each send_weights updates the model, then the
    # draft (start_draft_weight_update): both equal a fresh load and vLLM's
    # own reload of each, every update.
    spec = _spec(models, tmp_path, family="deepseek_v3", model=dict(mtp=True), draft=True)
    cluster = h.Cluster(spec)
    try:
        for round_ in (1, 2, 3):
            _ok(cluster.update(round_))
            _exact(cluster, round_)
        [plan] = cluster.workers("plan")
        [draft] = cluster.workers("plan", "draft")
    finally:
        cluster.close()
    # Each has its own plan: the model's loader skips the MTP layer's
    # names, the draft's takes only those and the embedding.
    mtp = "model.layers.2."
    assert all(k == "unneeded" for n, k in plan["kinds"].items() if n.startswith(mtp))
    assert {n for n, k in draft["kinds"].items() if k != "unneeded"} == {
        n for n in draft["kinds"] if n.startswith(mtp)} | {"model.embed_tokens.weight"}
    # Both write the shared embedding, the model's and the MTP layer's
    # copy: their order matters, so they go through the draft's loader.
    assert {n for n, k in draft["kinds"].items() if k == "fallback"} == {
        "model.embed_tokens.weight", mtp + "embed_tokens.weight"}
    # The draft's MLA attention derives W_UK_T and W_UV, as the model's.
    [attention] = draft["processed"]
    assert attention.startswith(mtp + "mtp_block.self_attn.") and attention.endswith("mla_attn")
    assert draft["stats"]["bytes_received"] > 0


def test_a_trainer_shard_that_cuts_a_block_is_refused_on_every_rank(models, tmp_path):
    # Two trainer ranks holding row halves: k_proj's 128 rows split at 64.
    spec = _spec(models, tmp_path, family="qwen3", fp8=True, model=FP8_MODEL, trainers=2,
                 sharded=True)
    cluster = h.Cluster(spec)
    try:
        before = cluster.workers("digest")
        results = cluster.update(1)
        assert cluster.workers("digest") == before
    finally:
        cluster.close()
    assert all(status == "error" for status, _ in results), results
    for _, message in results:
        assert "k_proj.weight" in message and "cuts a 128x128 block" in message, message


def test_a_restarted_worker_reads_its_plan_instead_of_tracing(models, tmp_path):
    spec = _spec(models, tmp_path, family="qwen3_moe", tp=2)
    first = h.Cluster(spec)
    try:
        _ok(first.update(1))
        _ok(first.update(2))
        assert all(p["traced"] for p in first.workers("plan"))
    finally:
        first.close()
    again = h.Cluster(h.Spec(**{**spec.__dict__, "master_port": 0, "vllm_port": 0}))
    try:
        for round_ in (3, 4):
            _ok(again.update(round_))
            _exact(again, round_)
        plans = again.workers("plan")
        assert not any(p["traced"] for p in plans)
        assert all(p["processed"] == [] for p in plans)
    finally:
        again.close()


# ---------------------------------------------------------------------------
# Failures: with atomic, the model keeps its weights; a new update works.


def _unchanged_then_recovers(cluster: h.Cluster, round_: int, **fault) -> list:
    before = cluster.workers("digest")
    results = cluster.update(round_, **fault)
    assert cluster.workers("digest") == before
    return results


def test_a_bad_checkpoint_fails_every_worker_and_changes_nothing(models, tmp_path):
    spec = _spec(models, tmp_path, family="llama", tp=2)
    cluster = h.Cluster(spec)
    try:
        _ok(cluster.update(1))
        _exact(cluster, 1)
        # A name the model has no place for: the workers cannot plan it.
        results = _unchanged_then_recovers(cluster, 2, variant="unknown_name")
        status, message = results[0]
        assert status == "error" and "bogus_proj" in message, message
        # A tensor sent in another dtype than declared: refused by the
        # sender before any rank moves a byte.
        results = _unchanged_then_recovers(cluster, 3, wrong_dtype={0: "o_proj.weight"})
        status, message = results[0]
        assert status == "error" and "torch.float16" in message, message
        # ... or in another shape.
        results = _unchanged_then_recovers(cluster, 4, wrong_shape={0: "o_proj.weight"})
        status, message = results[0]
        assert status == "error" and "o_proj.weight" in message and "(63, 64)" in message, \
            message
        # A name the source does not yield: the trainer names it, and every
        # worker learns that the trainer refused the update (it is alive).
        results = _unchanged_then_recovers(cluster, 5, missing={0: "layers.1.mlp.down_proj.weight"})
        status, message = results[0]
        name = "model.layers.1.mlp.down_proj.weight"
        assert status == "error" and f"lacks 1 names this rank holds, e.g. [{name!r}]" in message, \
            message
        for error in cluster.last_errors():
            assert "rank 0 (sender 0) refused the update: " in error and name in error, error
        # A source that raises: the trainer fails the update on every rank
        # with what it raised (the sender reads the source's pairs as they
        # come, so it is the update that the trainer refuses).
        results = _unchanged_then_recovers(cluster, 6, raising={0: "layers.1.mlp.down_proj.weight"})
        status, message = results[0]
        assert status == "error" and "could not read its tensors from Source: OSError: the " \
            f"source lost {name}" in message, message
        for error in cluster.last_errors():
            assert "rank 0 (sender 0) refused the update: load plan: sender rank 0 could not " \
                f"read its tensors from Source: OSError: the source lost {name}" in error, error
        # The next update is whole again.
        _ok(cluster.update(7))
        _exact(cluster, 7)
    finally:
        cluster.close()


@pytest.mark.parametrize("transport", [None, "ipc"])
def test_a_trainer_rank_that_dies_fails_every_worker_and_changes_nothing(models, tmp_path,
                                                                         transport):
    spec = _spec(models, tmp_path, family="llama", tp=2, trainers=2, sharded=True,
                 transport=transport)
    cluster = h.Cluster(spec)
    try:
        _ok(cluster.update(1))
        _ok(cluster.update(2))
        t0 = time.perf_counter()
        results = _unchanged_then_recovers(cluster, 3, die_after_s={1: 0.0})
        took = time.perf_counter() - t0
        status, message = results[0]
        # Every worker learns of the death from its connection, not from
        # the 60 s timeout, and the error says which rank died.
        assert status == "error" and "rank 1" in message, results
        assert took < spec.timeout / 4, took
        # New trainer processes, a fresh trainer_init: updates work again.
        cluster.restart_trainers()
        _ok(cluster.update(4))
        _exact(cluster, 4)
        h.dies_in_set_up_is_noticed(cluster, 5, "o_proj.weight")
    finally:
        cluster.close()


def test_ipc_workers_close_their_mappings_when_the_trainer_asks(models, tmp_path):
    # The trainer keeps its tensors across updates (as an optimizer does),
    # so from update 3 on (the endpoints the refined plans made at update 2)
    # its table does not change: a header per update. After update 3 the
    # workers close every mapping of the trainer's memory, and update 4
    # asks for the table again.
    spec = _spec(models, tmp_path, family="llama", tp=2, transport="ipc",
                 source_in_place=True)
    cluster = h.Cluster(spec)
    try:
        for round_ in (1, 2, 3, 4, 5):
            _ok(cluster.update(round_, release_mappings=round_ == 3))
            _exact(cluster, round_)
            h.check_mappings_after(cluster, round_, released=3)
    finally:
        cluster.close()


def test_release_mappings_is_for_the_ipc_transport(models, tmp_path):
    spec = _spec(models, tmp_path, family="llama", tp=1)
    cluster = h.Cluster(spec)
    try:
        [(status, message)] = cluster.update(1, release_mappings=True)
        assert status == "error" and "release_mappings is for transport 'ipc'" in message
        _ok(cluster.update(2))
        _exact(cluster, 2)
    finally:
        cluster.close()


def test_an_engine_that_does_not_start_the_update_fails_every_trainer_rank_at_once(
        models, tmp_path):
    # Rank 0's client cannot reach the engine: the workers are never asked,
    # so rank 1 must not wait for endpoints they will not make.
    spec = _spec(models, tmp_path, family="llama", tp=2, trainers=2, sharded=True)
    cluster = h.Cluster(spec)
    try:
        _ok(cluster.update(1))
        t0 = time.perf_counter()
        results = _unchanged_then_recovers(cluster, 2, engine_down=True)
        took = time.perf_counter() - t0
        assert [status for status, _ in results] == ["error", "error"], results
        assert all("the engine did not start the update: ConnectionError" in message
                   for _, message in results), results
        assert "told to trainer rank 1 by rank 0" in results[1][1], results
        assert took < spec.timeout / 4, took
        _ok(cluster.update(3))
        _exact(cluster, 3)
    finally:
        cluster.close()


def test_a_trainer_that_dies_in_the_first_update_is_named(models, tmp_path):
    # Trainer rank 0 serves the rendezvous store: the workers, planning or
    # setting up the first update's endpoints, lose it.
    spec = _spec(models, tmp_path, family="llama", tp=2)
    cluster = h.Cluster(spec)
    try:
        before = cluster.workers("digest")
        cluster.update(1, die_in_set_up={0})
        errors = cluster.last_errors()
        assert cluster.workers("digest") == before
        for error in errors:
            assert error is not None and error.startswith("TransferError: load plan: rank "), \
                errors
            assert "lost the rendezvous store" in error and "is gone (rank 0's" in error, error
        cluster.restart_trainers()
        _ok(cluster.update(2))
        _exact(cluster, 2)
        # The plan the first update would have refined is refined now.
        assert all(p["processed"] == [] for p in cluster.workers("plan"))
    finally:
        cluster.close()


# ---------------------------------------------------------------------------
# A checkpoint declared again, by later trainers.


@pytest.mark.parametrize("family, tp", [("qwen2", 2), ("deepseek_v2", 1)])
def test_a_checkpoint_declared_again_is_planned_as_the_first_was(models, tmp_path, family, tp):
    spec = _spec(models, tmp_path, family=family, tp=tp)
    cluster = h.Cluster(spec)
    try:
        _ok(cluster.update(1))
        _exact(cluster, 1)
        first = cluster.workers("plan")
        # New trainers (new trainer_inits) declaring the same names the
        # other way round, float32 for bf16, the original again; then the
        # same trainer declaring them reversed once more.
        for round_, variant, restart in ((2, "reversed", True), (3, "float32", True),
                                         (4, None, True), (5, "reversed", False)):
            if restart:
                cluster.restart_trainers()
            _ok(cluster.update(round_, variant=variant))
            _exact(cluster, round_, variant)
            for plan, before in zip(cluster.workers("plan"), first):
                assert "unneeded" not in plan["kinds"].values(), (variant, plan["report"])
                assert plan["processed"] == before["processed"]
        # A wrong shape: refused at planning, by every worker, with the
        # name, the declared shape and the model's, and nothing changes.
        cluster.restart_trainers()
        results = _unchanged_then_recovers(cluster, 6, variant="wrong_shape")
        status, message = results[0]
        assert status == "error" and "refused the set-up: cannot plan the update: load_weights " \
            "failed on 'lm_head.weight' (declared bfloat16 [255, 64])" in message, message
        assert "AssertionError" in message and "param: bfloat16 [" in message, message
        cluster.restart_trainers()
        _ok(cluster.update(7))
        _exact(cluster, 7)
    finally:
        cluster.close()


def test_the_workers_report_reaches_vllms_log(models, tmp_path, capfd, monkeypatch):
    # A vLLM process at its default level logs the plan's report with
    # vLLM's own lines (the harness's workers configure logging as vLLM's
    # worker processes do).
    monkeypatch.setenv("VLLM_LOGGING_LEVEL", "INFO")
    spec = _spec(models, tmp_path, family="llama")
    cluster = h.Cluster(spec)
    try:
        _ok(cluster.update(1))
        _ok(cluster.update(2))
    finally:
        cluster.close()
    out = capfd.readouterr().out
    # vLLM's format: level, time, [file:line], the message.
    ours = re.compile(r"INFO \d\d-\d\d [\d:]+ \[worker\.py:\d+\] load plan: ")
    lines = [line for line in out.splitlines() if "load plan: worker rank 1 traced its plan" in line]
    assert lines and all(ours.search(line) for line in lines), out[-2000:]
    assert any("load plan: " in line and " names: " in line and " direct (" in line
               for line in out.splitlines()), out[-2000:]
    # One line per update: its bytes, messages, rounds, time and the time
    # over the link probe's.
    update = re.compile(r"load plan: worker rank 1 update (\d+): bytes=\d+ messages=\d+ "
                        r"rounds=\d+ seconds=[\d.]+ probe_s=[\d.]+ over_probe=[\d.]+$")
    updates = [m.group(1) for line in out.splitlines() if ours.search(line)
               for m in [update.search(line)] if m]
    assert updates == ["1", "2"], out[-2000:]


# ---------------------------------------------------------------------------
# Pieces, in process.


def _chunked(t, meta):
    """What iter_local yields on each owner: torch.chunk per mesh axis."""
    out = {}
    for flat, rank in enumerate(meta.owners):
        coords, rest = [], flat
        for size in reversed(meta.mesh_shape):
            coords.append(rest % size)
            rest //= size
        piece = t
        for axis, p in zip(range(len(meta.mesh_shape)), meta.placements):
            if getattr(p, "dim", None) is not None:  # a Shard
                parts = piece.chunk(meta.mesh_shape[axis], dim=p.dim)
                c = coords[::-1][axis]
                piece = parts[c] if c < len(parts) else piece.narrow(p.dim, 0, 0)
        out[rank] = piece
    return out


@pytest.mark.parametrize("shape, mesh, placements", [
    ((5, 4), (2,), ("S0",)),
    ((7, 6), (2, 2), ("S0", "S1")),
    ((9, 3), (2, 3), ("S0", "S0")),
    ((3, 8), (4,), ("S0",)),  # the last owner holds nothing
    ((4, 4), (2, 2), ("R", "S1")),
])
@pytest.mark.parametrize("kind", ["vllm", "loadplan"])
def test_owner_boxes_are_what_iter_local_yields(shape, mesh, placements, kind):
    # vLLM's ParamMeta and loadplan.trainer's Param (a trainer without vLLM)
    # say the same.
    import math

    import torch

    from loadplan.trainer import owner_boxes

    if kind == "vllm":
        from vllm.distributed.weight_transfer.base import ParamMeta, Replicate, Shard
    else:
        from loadplan.trainer import Param as ParamMeta
        from loadplan.trainer import Replicate, Shard

    ps = tuple(Replicate() if p == "R" else Shard(int(p[1])) for p in placements)
    meta = ParamMeta("w", torch.float32, shape, owners=tuple(range(math.prod(mesh))),
                     mesh_shape=mesh, placements=ps)
    t = torch.arange(math.prod(shape), dtype=torch.float32).reshape(shape)
    boxes = owner_boxes(meta, math.prod(mesh))
    for rank, piece in _chunked(t, meta).items():
        if piece.numel() == 0:
            assert rank not in boxes
            continue
        box = boxes[rank]
        assert torch.equal(t[tuple(slice(a, b) for a, b in box)], piece), rank


def test_init_infos_refuse_what_cannot_work():
    from loadplan.vllm.info import LoadplanTrainerInitInfo, LoadplanWeightTransferUpdateInfo

    ok = dict(rank=0, master_address="127.0.0.1", master_port=29600, world_size=3)
    LoadplanTrainerInitInfo(**ok)
    for bad, match in [({"engine": "broadcast"}, "engine"), ({"num_trainer_ranks": 3}, "worker"),
                       ({"master_port": 0}, "port"), ({"transport": "mpi"}, "transport"),
                       ({"rank": 1}, "trainer rank"), ({"quantize_fp8": "*.weight"}, "string"),
                       ({"quantize_block": (128, 0)}, "quantize_block"),
                       ({"transport": "ipc", "quantize_fp8": ("*.weight",)}, "ipc")]:
        with pytest.raises(ValueError, match=match):
            LoadplanTrainerInitInfo(**{**ok, **bad})
    with pytest.raises(ValueError, match="pair up"):
        LoadplanWeightTransferUpdateInfo(epoch=0, names=["a"], dtype_names=[], shapes=[])
    with pytest.raises(ValueError, match="draft must be a bool"):
        LoadplanWeightTransferUpdateInfo(epoch=0, draft="yes")


def test_the_http_client_starts_a_draft_update_at_vllms_route():
    import http.server
    import threading

    from vllm.entrypoints.rl.online.api_router import router

    from loadplan.vllm import HTTPWeightSyncClient

    posted = []

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_POST(self):  # noqa: N802 - http.server's name
            posted.append(self.path)
            self.send_response(200)
            self.end_headers()

        def log_message(self, *args):
            pass

    server = http.server.HTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        client = HTTPWeightSyncClient(f"http://127.0.0.1:{server.server_port}/")
        client.start_weight_update()
        client.start_draft_weight_update()
    finally:
        server.shutdown()
    assert posted == ["/start_weight_update", "/start_draft_weight_update"]
    # Routes vLLM's server has.
    assert set(posted) <= {r.path for r in router.routes}


def test_the_backend_is_registered_through_vllms_plugins():
    from vllm.distributed.weight_transfer.factory import (
        WeightTransferEngineFactory,
        WeightTransferTrainerFactory,
    )
    from vllm.plugins import load_general_plugins

    load_general_plugins()
    assert WeightTransferEngineFactory._registry["loadplan"]().__name__ == \
        "LoadplanWeightTransferEngine"
    assert WeightTransferTrainerFactory._registry["loadplan"]().__name__ == \
        "LoadplanTrainerWeightTransferEngine"


def test_the_trainer_declares_the_fp8_checkpoint_of_its_patterns():
    import torch
    from vllm.distributed.weight_transfer.base import ParamMeta

    from loadplan.vllm.info import LoadplanTrainerInitInfo
    from loadplan.vllm.trainer import LoadplanTrainerWeightTransferEngine

    def declared(*patterns):
        engine = object.__new__(LoadplanTrainerWeightTransferEngine)
        engine.init_info = LoadplanTrainerInitInfo(
            rank=0, master_address="127.0.0.1", master_port=29600, world_size=2,
            quantize_fp8=patterns)
        metas, quantize = engine._declared(meta)
        return [(m.name, m.dtype, tuple(m.shape)) for m in metas], quantize

    meta = [ParamMeta("a.proj.weight", torch.bfloat16, (256, 130)),
            ParamMeta("a.proj.bias", torch.bfloat16, (256,)),
            ParamMeta("norm.weight", torch.bfloat16, (130,))]
    assert declared("*.weight") == ([
        ("a.proj.weight", torch.float8_e4m3fn, (256, 130)),
        ("a.proj.weight_scale_inv", torch.float32, (2, 2)),
        ("a.proj.bias", torch.bfloat16, (256,)), ("norm.weight", torch.bfloat16, (130,))],
        {"a.proj.weight": "a.proj.weight_scale_inv"})
    assert declared()[1] == {}
    with pytest.raises(ValueError, match="match no 2-D weight"):
        declared("*.weight", "*.bias")

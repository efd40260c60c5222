"""vLLM's own model classes whose loaders rearrange fused tensors plan with
no fallback: Bloom's ``query_key_value`` (a per-head layout reshaped into
q, k, v: a reshape torch must copy, then the TP narrow) and Falcon's (a
view into kv groups, three narrows reshaped, then ``torch.cat``), in both
of Falcon's layouts vLLM loads: the new decoder architecture (kv heads
groups) and multi-query (one kv head, replicated across TP ranks).

Each class is planned with ``plan_loads`` at TP=1 and on both ranks of
TP=2 (separate processes over Gloo, vllm_harness.plan_ranks); a random
update applied through ``load_planned`` must leave every parameter and
buffer byte-equal to vLLM's ``load_weights`` of the same weights."""

from __future__ import annotations

import pytest

pytest.importorskip("vllm")

import vllm_harness as h  # noqa: E402

FAMILIES = ["bloom", "falcon", "falcon_mq"]
LAYOUTS = [(1, 0), (2, 0), (2, 1)]  # (TP size, rank)


@pytest.fixture(scope="module")
def results(tmp_path_factory):
    root = str(tmp_path_factory.mktemp("models"))
    return h.plan_ranks(FAMILIES, root, LAYOUTS)


@pytest.mark.parametrize("layout", LAYOUTS, ids=lambda t: f"tp{t[0]}-rank{t[1]}")
@pytest.mark.parametrize("family", FAMILIES)
def test_fused_qkv_is_direct_and_equals_load_weights(results, family, layout):
    got = results[layout][family]
    # The tiny checkpoints ship every tensor in the model's dtype, as the
    # real ones do: every name must be direct.
    assert got["checkpoint_dtypes"] == got["param_dtypes"] == ["torch.bfloat16"]
    entries = got["entries"]
    fallbacks = {n: reason for n, (kind, reason, _) in entries.items() if kind != "direct"}
    assert not fallbacks, fallbacks
    fused = [n for n in entries if "query_key_value" in n]
    # Bloom has the weight and the bias of each of its 2 layers, Falcon the weight.
    assert len(fused) == (4 if family == "bloom" else 2), fused
    if family == "bloom" or layout == (1, 0) and family == "falcon":
        # q, k and v come from other places of the checkpoint (per head for
        # Bloom, per kv group for Falcon): several writes, not one box.
        # (Where this rank's rows of the checkpoint are q, k, v in order,
        # one write is right: Falcon's kv group at TP=2, multi-query at TP=1.)
        for name in fused:
            assert entries[name][2] > 1, (name, entries[name])
    assert got["differ"] == []

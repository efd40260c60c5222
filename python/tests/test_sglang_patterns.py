"""SGLang's own model classes plan with no fallback, and a planned update
equals SGLang's ``load_weights`` byte for byte.

SGLang builds its models on the CPU once its process state is a TP
worker's (sglang_tiny); its loaders differ from vLLM's (their own fused
qkv and gate/up stacking, their own fused MoE with expert parallelism,
their own block-fp8 linear), so the core is tried on them as it is on
vLLM's: Qwen3, Qwen3-MoE (without and with expert parallelism) and a
block-fp8 Qwen3, each planned with ``plan_loads`` at TP=1 and on both ranks
of TP=2 (separate processes over Gloo, vllm_harness.plan_ranks); a random
update applied through ``load_planned`` must leave every parameter and
buffer byte-equal to SGLang's ``load_weights`` of the same weights."""

from __future__ import annotations

import pytest

pytest.importorskip("sglang")

import vllm_harness as h  # noqa: E402

# SGLang's block-fp8 linears take only whole 128-row blocks per rank: at
# TP=2, 4 kv heads of 64 (vLLM's tests use 2).
FP8_MODEL = dict(fp8=True, hidden=256, intermediate=256, heads=4, kv_heads=4)
FAMILIES = ["qwen3", "qwen3_moe", ("qwen3-fp8", "qwen3", FP8_MODEL)]
LAYOUTS = [(1, 0), (2, 0), (2, 1)]  # (TP size, rank)
LABELS = [f if isinstance(f, str) else f[0] for f in FAMILIES]


@pytest.fixture(scope="module")
def root(tmp_path_factory):
    return str(tmp_path_factory.mktemp("models"))


@pytest.fixture(scope="module")
def results(root):
    return h.plan_ranks(FAMILIES, root, LAYOUTS, engine="sglang")


@pytest.fixture(scope="module")
def results_ep(root):
    # Expert parallelism: each of the 2 ranks holds half of the experts,
    # whole, where without it each holds a slice of every expert.
    return h.plan_ranks(["qwen3_moe"], root, LAYOUTS[1:], engine="sglang",
                        build={"ep_size": 2})


def _check(got, fp8: bool = False) -> None:
    """Every name direct (or, with expert parallelism, another rank's expert:
    unneeded here), every tensor as SGLang's ``load_weights`` leaves it."""
    if fp8:
        assert "torch.float8_e4m3fn" in got["checkpoint_dtypes"], got["checkpoint_dtypes"]
    else:
        assert got["checkpoint_dtypes"] == ["torch.bfloat16"]
    entries = got["entries"]
    fallbacks = {n: reason for n, (kind, reason, _) in entries.items() if kind == "fallback"}
    assert not fallbacks, fallbacks
    assert got["differ"] == []


@pytest.mark.parametrize("layout", LAYOUTS, ids=lambda t: f"tp{t[0]}-rank{t[1]}")
@pytest.mark.parametrize("label", LABELS)
def test_direct_and_equals_load_weights(results, label, layout):
    got = results[layout][label]
    _check(got, fp8=label.endswith("fp8"))
    entries = got["entries"]
    # SGLang stacks q, k, v into qkv_proj and gate, up into gate_up_proj:
    # each of these checkpoint names is one write into a fused parameter.
    assert [n for n in entries if n.endswith("self_attn.k_proj.weight")]
    for name, (_, _, writes) in entries.items():
        assert writes >= 1, name
    if label == "qwen3_moe":
        experts = [n for n in entries if ".mlp.experts." in n]
        assert len(experts) == 2 * 4 * 3, experts  # layers x experts x (gate, up, down)
        if layout[0] == 2:
            # Without expert parallelism every rank holds a slice of every
            # expert: each expert's name is written on both ranks.
            assert all(entries[n][2] == 1 for n in experts)


@pytest.mark.parametrize("layout", LAYOUTS[1:], ids=lambda t: f"tp{t[0]}-rank{t[1]}")
def test_expert_parallel_direct_and_equals_load_weights(results_ep, layout):
    got = results_ep[layout]["qwen3_moe"]
    _check(got)
    entries = got["entries"]
    experts = [n for n in entries if ".mlp.experts." in n]
    # Half of the experts are this rank's, direct; the others' names are
    # unneeded here.
    written = {n.split(".mlp.experts.")[1].split(".")[0] for n in experts
               if entries[n][0] == "direct"}
    assert written == ({"0", "1"} if layout[1] == 0 else {"2", "3"})
    assert all(entries[n][0] == "unneeded" and entries[n][2] == 0 for n in experts
               if n.split(".mlp.experts.")[1].split(".")[0] not in written)
    assert all(kind == "direct" for n, (kind, _, _) in entries.items() if n not in experts)

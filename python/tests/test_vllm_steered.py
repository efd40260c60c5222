"""The ``loadplan`` backend where vLLM's post-load processing takes its GPU
paths: vLLM's own classes steered on the CPU (``vllm_steer``) onto the
kernels an NVIDIA GPU picks by default (DeepGEMM's E8M0 requant of
block-fp8 linears, FlashInfer's MoE layouts), in every process of the
scenario. Each scenario checks that the path was taken (the kernel class,
the backend enum, the tensors' dtypes and shapes after processing), and
that every update equals, byte for byte, a model freshly loaded under the
same steering, and vLLM's own reload of it. A layer whose processing
changes a tensor is either rearranged (its processing only moves
elements: its names written directly to where the processing puts them,
a clamp run after the update), computed in place (its names written
directly in the checkpoint format, which its live tensors keep, and its
processing run on them after the update) or reloaded through vLLM's
layerwise reload (its names fallbacks)."""

from __future__ import annotations

import pytest

pytest.importorskip("vllm")

import vllm_harness as h  # noqa: E402
import vllm_tiny as tiny  # noqa: E402

FP8_MODEL = dict(fp8=True, hidden=256, intermediate=256, heads=4, kv_heads=2)
# DeepSeek-V3 with MLA sizes whose every fp8 linear DeepGEMM takes.
FP8_MLA_MODEL = dict(FP8_MODEL, mla=tiny.MLA_FP8)
# gpt-oss with mxfp4 experts: hidden and intermediate sizes FlashInfer's
# TRT-LLM experts take unpadded (multiples of 256).
MXFP4_MODEL = dict(mxfp4=True, hidden=256, intermediate=256)
MXFP4_MODEL_TP2 = dict(MXFP4_MODEL, intermediate=512)
# DeepSeek-V3 (Kimi-K2's class) with int4 W4A16 experts; the experts'
# intermediate size (96) not a multiple of Marlin's tile (64): padded to 128.
INT4_MODEL = dict(int4=True, hidden=128, intermediate=192)
# Qwen3 with every decoder linear int4 W4A16 (compressed-tensors).
INT4_DENSE_MODEL = dict(int4=True, hidden=128, intermediate=256)
# At TP=2 each rank's share of k and v is still a whole 128-row block.
FP8_MODEL_TP2 = dict(FP8_MODEL, kv_heads=4)

# name: (Spec fields, the lines vllm_steer.taken reports on every worker,
# the suffixes of the modules the backend reloads on every update, of
# those whose processing it runs in place after every update, and of those
# whose names it writes where their processing moves them).
FP8_LINEARS = ("self_attn.qkv_proj", "self_attn.o_proj", "mlp.gate_up_proj", "mlp.down_proj")
# DeepSeek-V3's: MLA's fused q_a/kv_a, q_b, kv_b, o, the dense and shared MLPs.
MLA_FP8_LINEARS = ("self_attn.fused_qkv_a_proj", "self_attn.q_b_proj", "self_attn.kv_b_proj",
                   "self_attn.o_proj", "gate_up_proj", "down_proj")
SCENARIOS = {
    # Qwen3-FP8 on a Hopper: every block-fp8 linear requantized to
    # power-of-two scales in place.
    "qwen3-fp8-deepgemm-sm90": (
        dict(family="qwen3", model=FP8_MODEL, steer="deepgemm-sm90"),
        ["DeepGemmFp8BlockScaledMMKernel (E8M0): 8 layers, scales float32"],
        (), FP8_LINEARS, ()),
    # ... on a Blackwell: and the scales packed into DeepGEMM's UE8M0 int32
    # layout (kernel_refs.transform_sf_into_required_layout).
    "qwen3-fp8-deepgemm-sm100": (
        dict(family="qwen3", model=FP8_MODEL, steer="deepgemm-sm100"),
        ["DeepGemmFp8BlockScaledMMKernel (E8M0): 8 layers, scales int32"],
        (), FP8_LINEARS, ()),
    # Qwen3-MoE bf16 on a Blackwell at TP=2: FlashInfer TRT-LLM's experts,
    # the intermediate (32 per rank) padded to 128, the padding zeroed and
    # each expert's rows permuted in place through a scratch: rearranged.
    "qwen3_moe-tp2-fi-trtllm-bf16": (
        dict(family="qwen3_moe", tp=2, steer="fi-trtllm-bf16-moe"),
        ["unquantized_backend FLASHINFER_TRTLLM: 2 layers, intermediate 32 padded to 128"],
        (), (), ("mlp.experts.routed_experts",)),
    # A block-fp8 MoE on a Hopper with expert parallelism: FlashInfer
    # CUTLASS experts (w13's halves swapped, scales clamped: rearranged)
    # and DeepGEMM linears.
    "qwen3_moe-fp8-tp2-ep-hopper": (
        dict(family="qwen3_moe", model=FP8_MODEL_TP2, tp=2, expert_parallel=True,
             steer="deepgemm-sm90+fi-cutlass-fp8-moe"),
        ["DeepGemmFp8BlockScaledMMKernel (E8M0): 4 layers, scales float32",
         "fp8_backend FLASHINFER_CUTLASS: 2 layers"],
        (), ("self_attn.qkv_proj", "self_attn.o_proj"), ("mlp.experts.routed_experts",)),
    # ... on a Blackwell: FlashInfer TRT-LLM experts (the swap, each
    # expert's rows shuffled and regrouped into BlockMajorK order, new 4-d
    # tensors, the scales clamped) and DeepGEMM linears with packed scales.
    "qwen3_moe-fp8-tp2-ep-blackwell": (
        dict(family="qwen3_moe", model=FP8_MODEL_TP2, tp=2, expert_parallel=True,
             steer="deepgemm-sm100+fi-trtllm-fp8-moe"),
        ["DeepGemmFp8BlockScaledMMKernel (E8M0): 4 layers, scales int32",
         "fp8_backend FLASHINFER_TRTLLM: 2 layers, BlockMajorK"],
        (), ("self_attn.qkv_proj", "self_attn.o_proj"), ("mlp.experts.routed_experts",)),
    # DeepSeek-V3 block-fp8 on a Hopper with expert parallelism (here one
    # rank): DeepGEMM's linears (MLA's fused q_a/kv_a, q_b, kv_b, o and
    # the dense and shared MLPs), FlashInfer CUTLASS experts; MLA's attention derives
    # W_UK_T and W_UV from kv_b_proj, processed again after each update.
    "deepseek_v3-fp8-hopper": (
        dict(family="deepseek_v3", model=FP8_MLA_MODEL,
             steer="deepgemm-sm90+fi-cutlass-fp8-moe"),
        ["DeepGemmFp8BlockScaledMMKernel (E8M0): 12 layers, scales float32",
         "fp8_backend FLASHINFER_CUTLASS: 1 layers"],
        ("mla_attn.mla_attn",),
        MLA_FP8_LINEARS, ("mlp.experts.routed_experts",)),
    # ... with its MTP layer as the speculative draft, updated with the
    # model (draft=True): the draft's fp8 linears requantized, its experts
    # swapped, as the model's.
    "deepseek_v3-fp8-mtp-hopper": (
        dict(family="deepseek_v3", model=dict(FP8_MLA_MODEL, mtp=True), draft=True,
             steer="deepgemm-sm90+fi-cutlass-fp8-moe"),
        ["DeepGemmFp8BlockScaledMMKernel (E8M0): 12 layers, scales float32",
         "fp8_backend FLASHINFER_CUTLASS: 1 layers"],
        ("mla_attn.mla_attn",),
        MLA_FP8_LINEARS, ("mlp.experts.routed_experts",)),
    # ... on a Blackwell: the scales packed, the experts in BlockMajorK order.
    "deepseek_v3-fp8-blackwell": (
        dict(family="deepseek_v3", model=FP8_MLA_MODEL,
             steer="deepgemm-sm100+fi-trtllm-fp8-moe"),
        ["DeepGemmFp8BlockScaledMMKernel (E8M0): 12 layers, scales int32",
         "fp8_backend FLASHINFER_TRTLLM: 1 layers, BlockMajorK"],
        ("mla_attn.mla_attn",),
        MLA_FP8_LINEARS, ("mlp.experts.routed_experts",)),
    # gpt-oss with mxfp4 experts on a Blackwell: FlashInfer TRT-LLM's
    # experts (biases converted to fp32, gate and up rows swapped in pairs,
    # each expert's rows shuffled, block scales interleaved into 128x4
    # tiles: new tensors), fed the checkpoint's blocks and scales as they
    # are: rearranged, the biases written converted.
    "gpt_oss-mxfp4-fi-trtllm": (
        dict(family="gpt_oss", model=MXFP4_MODEL, steer="fi-trtllm-mxfp4-moe"),
        ["mxfp4_backend FLASHINFER_TRTLLM_MXFP4_BF16: 2 layers, biases fp32"],
        (), (), ("mlp.experts.routed_experts",)),
    # ... at TP=2: on the second rank the loader zeros the incoming
    # down_proj_bias (the bias is added once), a constant written into the
    # live fp32 biases while planning; the rest as at TP=1.
    "gpt_oss-mxfp4-tp2-fi-trtllm": (
        dict(family="gpt_oss", model=MXFP4_MODEL_TP2, tp=2, steer="fi-trtllm-mxfp4-moe"),
        ["mxfp4_backend FLASHINFER_TRTLLM_MXFP4_BF16: 2 layers, biases fp32"],
        (), (), ("mlp.experts.routed_experts",)),
    # Kimi-K2's int4 experts (compressed-tensors W4A16) on a Blackwell:
    # Marlin's experts (weights and scales transposed K-first, the
    # intermediate zero-padded to the tile, the 4-bit values repacked into
    # Marlin's tiles, the scales permuted: new tensors). Written straight
    # to where the processing puts them, the weights through the plan's
    # marlin_w4 transform (MLA's attention, which derives W_UK_T and W_UV
    # from kv_b_proj, reloaded as in every DeepSeek-V3 scenario here).
    "deepseek_v3-int4-marlin": (
        dict(family="deepseek_v3", model=INT4_MODEL, steer="marlin-int4-moe"),
        ["wna16_backend MARLIN: 1 layers, intermediate 96 padded to 128"],
        ("mla_attn.mla_attn",), (), ("mlp.experts.routed_experts",)),
    # A dense W4A16 model on an NVIDIA GPU: Marlin's linear kernel (each
    # weight K-first and repacked, its scales permuted: new tensors, set as
    # the parameters' data). Written straight to where the processing puts
    # them, the weights through marlin_w4.
    "qwen3-int4-marlin": (
        dict(family="qwen3", model=INT4_DENSE_MODEL, steer="marlin-int4-linear"),
        ["MarlinLinearKernel: 8 layers"],
        (), (), FP8_LINEARS),
}


@pytest.fixture(scope="module")
def models(tmp_path_factory):
    root = tmp_path_factory.mktemp("models")
    return lambda family, **sizes: h.saved_model(family, str(root), **sizes)


@pytest.mark.parametrize("name", list(SCENARIOS))
def test_steered_updates_equal_a_fresh_load_and_vllms_own_reload(models, tmp_path, name):
    fields, taken, reloaded, computed, moved = SCENARIOS[name]
    fields = dict(fields)
    model = fields.pop("model", {})
    spec = h.Spec(model_dir=models(fields["family"], **model), plan_dir=str(tmp_path / "plans"),
                  timeout=60.0, fp8=bool(model.get("fp8")), **fields)
    cluster = h.Cluster(spec)
    try:
        assert cluster.workers("taken") == [taken] * spec.tp
        for round_ in (1, 2):
            results = cluster.update(round_)
            assert all(status == "ok" for status, _ in results), results
            problems = h.inexact(cluster, round_)
            assert not problems, problems[0]
        # The processing still took the steered path after the updates.
        assert cluster.workers("taken") == [taken] * spec.tp
        plans = cluster.workers("plan")
        drafts = cluster.workers("plan", "draft") if spec.draft else []
    finally:
        cluster.close()
    for plan in drafts:
        # The MTP draft's layers took the same paths, and are handled as
        # the model's: its fp8 linears computed in place, its experts
        # written where the swap puts them, its MLA attention processed.
        mtp = "model.layers.2.mtp_block."
        assert [p.removeprefix(mtp) for p in plan["processed"]] == ["self_attn.mla_attn.mla_attn"]
        assert sorted(p.removeprefix(mtp) for p in plan["recomputed"]) == sorted(
            ("self_attn.fused_qkv_a_proj", "self_attn.q_b_proj", "self_attn.kv_b_proj",
             "self_attn.o_proj", "mlp.shared_experts.gate_up_proj",
             "mlp.shared_experts.down_proj")), plan["recomputed"]
        assert [p.removeprefix(mtp) for p in plan["rearranged"]] == [
            "mlp.experts.routed_experts"], plan["rearranged"]
    for plan in plans:
        # The saved plan's key names the kernels and backends the steered
        # processing chose: a plan made under other choices is not reused.
        chosen = [line.split(" (")[0].split(":")[0] for line in taken]
        signature = " ".join(plan["signature"])
        assert all(c.split()[-1] in signature for c in chosen), (chosen, plan["signature"])
        # The layers whose steered processing changes a tensor are reloaded
        # on every update (their names are fallbacks) or computed in place
        # (their names direct), as the scenario says.
        def kinds(modules):
            return {m.rsplit(".", 1)[-1] for m in modules}

        assert kinds(plan["processed"]) == kinds(reloaded), plan["processed"]
        assert all(p.endswith(reloaded) for p in plan["processed"]), plan["processed"]
        assert kinds(plan["recomputed"]) == kinds(computed), plan["recomputed"]
        assert all(p.endswith(computed) for p in plan["recomputed"]), plan["recomputed"]
        fallbacks = {n: r for n, r in plan["reasons"].items() if plan["kinds"][n] == "fallback"}
        reloads = {n: r for n, r in fallbacks.items() if r.startswith("vLLM processes ")}
        # (MLA's attention has no names: its processing derives W_UK_T and
        # W_UV from kv_b_proj.)
        assert bool(reloads) == any(not r.endswith("attn") for r in reloaded), plan["report"]
        assert all(r.startswith("vLLM processes model.layers.") for r in reloads.values())
        into = {n for n, modules in plan["modules"].items()
                if set(modules) & set(plan["recomputed"])}
        assert bool(into) == bool(computed)
        assert all(plan["kinds"][n] == "direct" for n in into)
        # The layers whose processing only moves elements: every name of
        # theirs is written directly (where the processing puts it).
        assert kinds(plan["rearranged"]) == kinds(moved), plan["rearranged"]
        assert all(p.endswith(moved) for p in plan["rearranged"]), plan["rearranged"]
        # (A W4A16 weight's shape, int64 in the checkpoint: the experts'
        # is loaded into their bfloat16 tensor, a conversion no executor
        # does; a fused linear's shards each write the whole of the fused
        # one's, overlapping. So fallbacks, loaded on each update after the
        # direct writes, as the worker's proof loads them.)
        shapes = {n for n, r in fallbacks.items() if n.endswith(".weight_shape") and (
            r.startswith("casts int64 to bfloat16") or r.startswith("writes overlap with"))}
        assert bool(shapes) == ("int4" in model and bool(moved)), shapes
        into = {n for n, modules in plan["modules"].items()
                if set(modules) & set(plan["rearranged"])}
        assert bool(into) == bool(moved)
        assert all(plan["kinds"][n] == "direct" for n in into - shapes)
        # What the processing changes the layout of (DeepGEMM's int32
        # scales on Blackwell) is loaded into its checkpoint format on each
        # update; every weight is written directly (or, with expert
        # parallelism, not needed on this rank).
        staged = {n for n, r in fallbacks.items() if r.startswith("vLLM changes the layout of ")}
        assert set(fallbacks) == set(reloads) | staged | shapes, fallbacks
        expect = {n for n in plan["kinds"]
                  if n.endswith("weight_scale_inv") and ".experts." not in n} \
            if "scales int32" in taken[0] else set()
        assert staged == expect, staged
        assert all(plan["kinds"][n] != "fallback" for n in plan["kinds"]
                   if n.endswith("proj.weight")), plan["report"]


def test_flashinfer_sinks_follow_every_update(models, tmp_path):
    # FlashInfer keeps an fp32 copy of the sinks on the attention backend
    # object, which only the attention layer's processing refreshes: the
    # sinks are written directly, then that processing runs again.
    spec = h.Spec(model_dir=models("gpt_oss"), plan_dir=str(tmp_path / "plans"), timeout=60.0,
                  family="gpt_oss", steer="fi-attn-sinks")
    cluster = h.Cluster(spec)
    try:
        taken = cluster.workers("taken")
        assert taken == [["fp32 sinks on the attention backend: 2 layers (from bfloat16)"]], taken
        for round_ in (1, 2, 3):
            results = cluster.update(round_)
            assert all(status == "ok" for status, _ in results), results
            for c in cluster.workers("check", (round_, None)):
                # vLLM's reload refreshes the copy too (it differs from a
                # fresh load only in gpt-oss's experts, which it leaves stale).
                known = h.VLLM_STALE["gpt_oss"]
                assert not [d for d in c["references"] if not any(s in d for s in known)], \
                    f"vLLM's own reload is wrong at {c['references']}"
                assert not c["fresh"], f"update {round_}: loadplan differs at {c['fresh']}"
        # After the observed first update: the attention layers are not
        # reloaded, their sinks are written in place, and their processing
        # runs again.
        [plan] = cluster.workers("plan")
        attention = [n for n in plan["refreshed"] if n.endswith(".attn.attn")]
        assert len(attention) == 2, plan["refreshed"]
        assert not set(attention) & set(plan["processed"]), plan["processed"]
        sinks = [n for n in plan["kinds"] if n.endswith(".sinks")]
        assert sinks and all(plan["kinds"][n] == "direct" for n in sinks), \
            {n: plan["kinds"][n] for n in sinks}
    finally:
        cluster.close()


def test_a_restarted_worker_traces_its_rearranged_layers_again(models, tmp_path):
    # A worker that reads its saved plan (no loader trace) traces the
    # processing of its rearranged layers again (data-free) for their
    # epilogues, and its updates stay exact.
    spec = h.Spec(model_dir=models("qwen3_moe", **FP8_MODEL), plan_dir=str(tmp_path / "plans"),
                  timeout=60.0, fp8=True, family="qwen3_moe", steer="fi-trtllm-fp8-moe")
    first = h.Cluster(spec)
    try:
        for round_ in (1, 2):
            assert all(s == "ok" for s, _ in first.update(round_))
        [before] = first.workers("plan")
        assert before["traced"] and len(before["rearranged"]) == 2, before["rearranged"]
    finally:
        first.close()
    again = h.Cluster(h.Spec(**{**spec.__dict__, "master_port": 0, "vllm_port": 0}))
    try:
        for round_ in (3, 4):
            results = again.update(round_)
            assert all(s == "ok" for s, _ in results), results
            problems = h.inexact(again, round_)
            assert not problems, problems[0]
        [plan] = again.workers("plan")
        assert not plan["traced"]
        assert plan["rearranged"] == before["rearranged"] and plan["processed"] == []
    finally:
        again.close()

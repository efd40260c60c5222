"""The bundled example models (loadplan.examples).

First, independently of loadplan: their plain ``load_weights`` puts every
rank's part of every checkpoint tensor where vLLM would (checked against an
oracle written from the sharding rules, not from the loaders). Then, for
tp_size 1, 2 and 4 and every rank: the plan's kind of every name, and
``loadplan.verify`` byte for byte.
"""

from __future__ import annotations

import pytest
import torch

import loadplan
from loadplan.examples import deepseek_mla, fp8, llama, qwen2_moe
from loadplan.examples._common import cdiv
from loadplan.examples._layers import pad_vocab_size
from loadplan.examples.qwen2_moe import local_experts

FP8 = torch.float8_e4m3fn
TP_RANKS = [(tp, r) for tp in (1, 2, 4) for r in range(tp)]


def random_weights(metas, seed: int = 0) -> dict[str, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    return {m.name: torch.randn(m.shape, generator=g).to(m.dtype) for m in metas}


def load(module, make_kw: dict, tp: int, seed: int = 0):
    """Every rank's model loaded with the same random checkpoint."""
    models = []
    for r in range(tp):
        model, metas = module.make(r, tp, **make_kw)
        weights = random_weights(metas, seed)
        model.load_weights(list(weights.items()))
        models.append(model)
    return models, weights


def same(got: torch.Tensor, want: torch.Tensor, what: str) -> None:
    assert got.dtype == want.dtype and got.shape == want.shape, (
        what, got.dtype, want.dtype, tuple(got.shape), tuple(want.shape))
    assert torch.equal(got.contiguous().reshape(-1).view(torch.uint8),
                       want.contiguous().reshape(-1).view(torch.uint8)), what


def part(t: torch.Tensor, rank: int, parts: int, dim: int = 0) -> torch.Tensor:
    return t.chunk(parts, dim)[rank]


def check_params(model, want: dict[str, torch.Tensor]) -> None:
    params = dict(model.named_parameters())
    assert set(params) == set(want), set(params) ^ set(want)
    for name, tensor in want.items():
        same(params[name].data, tensor, name)


def embedding(w: torch.Tensor, rank: int, tp: int, padding: int = 64) -> torch.Tensor:
    """A vocab-parallel shard: this rank's rows of the padded vocabulary,
    zeros for the padding."""
    per = pad_vocab_size(w.shape[0], padding) // tp
    out = torch.zeros(per, w.shape[1], dtype=w.dtype)
    rows = w[rank * per:(rank + 1) * per]
    out[: rows.shape[0]] = rows
    return out


def outer(w, rank, tp, lm_head=True) -> dict[str, torch.Tensor]:
    """What every example holds around its layers: embedding, final norm and
    (untied) lm_head."""
    want = {"model.embed_tokens.weight": embedding(w["model.embed_tokens.weight"], rank, tp),
            "model.norm.weight": w["model.norm.weight"]}
    if lm_head:
        want["lm_head.weight"] = embedding(w["lm_head.weight"], rank, tp)
    return want


def mlp_and_norms(w, p: str, rank: int, tp: int) -> dict[str, torch.Tensor]:
    """A dense layer's gated MLP (gate_up fused) and its two norms."""
    return {p + "mlp.gate_up_proj.weight": merged(w[p + "mlp.gate_proj.weight"],
                                                  w[p + "mlp.up_proj.weight"], rank, tp),
            p + "mlp.down_proj.weight": part(w[p + "mlp.down_proj.weight"], rank, tp, 1),
            p + "input_layernorm.weight": w[p + "input_layernorm.weight"],
            p + "post_attention_layernorm.weight": w[p + "post_attention_layernorm.weight"]}


def qkv(q, k, v, rank, tp, num_kv_heads):
    kv_rank = rank // max(1, tp // num_kv_heads)
    kv_parts = min(tp, num_kv_heads)
    return torch.cat([part(q, rank, tp), part(k, kv_rank, kv_parts), part(v, kv_rank, kv_parts)])


def merged(a, b, rank, tp):
    return torch.cat([part(a, rank, tp), part(b, rank, tp)])


# -------------------------------------------------- plain load_weights


@pytest.mark.parametrize("tied", [True, False])
@pytest.mark.parametrize("tp", [1, 2, 4])
def test_llama_load_weights_shards(tp, tied):
    models, w = load(llama, {"tie_word_embeddings": tied}, tp)
    for r, model in enumerate(models):
        want = outer(w, r, tp, lm_head=not tied)
        for i in range(2):
            p = f"model.layers.{i}."
            want[p + "self_attn.qkv_proj.weight"] = qkv(
                w[p + "self_attn.q_proj.weight"], w[p + "self_attn.k_proj.weight"],
                w[p + "self_attn.v_proj.weight"], r, tp, num_kv_heads=2)
            want[p + "self_attn.o_proj.weight"] = part(w[p + "self_attn.o_proj.weight"], r, tp, 1)
            want.update(mlp_and_norms(w, p, r, tp))
        check_params(model, want)


@pytest.mark.parametrize("ep", [False, True])
@pytest.mark.parametrize("tp", [1, 2, 4])
def test_qwen2_moe_load_weights_shards(tp, ep):
    models, w = load(qwen2_moe, {"enable_expert_parallel": ep}, tp)
    for r, model in enumerate(models):
        want = outer(w, r, tp)
        mine = local_experts(4, r, tp, ep)
        moe_tp, moe_rank = (1, 0) if ep else (tp, r)
        for i in range(2):
            p = f"model.layers.{i}."
            a = p + "self_attn."
            want[a + "qkv_proj.weight"] = qkv(w[a + "q_proj.weight"], w[a + "k_proj.weight"],
                                              w[a + "v_proj.weight"], r, tp, num_kv_heads=2)
            want[a + "qkv_proj.bias"] = qkv(w[a + "q_proj.bias"], w[a + "k_proj.bias"],
                                            w[a + "v_proj.bias"], r, tp, num_kv_heads=2)
            want[a + "o_proj.weight"] = part(w[a + "o_proj.weight"], r, tp, 1)
            e = p + "mlp.experts."
            want[e + "w13_weight"] = torch.stack([
                merged(w[f"{e}{x}.gate_proj.weight"], w[f"{e}{x}.up_proj.weight"], moe_rank,
                       moe_tp) for x in mine])
            want[e + "w2_weight"] = torch.stack([
                part(w[f"{e}{x}.down_proj.weight"], moe_rank, moe_tp, 1) for x in mine])
            s = p + "mlp.shared_expert."
            want[s + "gate_up_proj.weight"] = merged(w[s + "gate_proj.weight"],
                                                     w[s + "up_proj.weight"], r, tp)
            want[s + "down_proj.weight"] = part(w[s + "down_proj.weight"], r, tp, 1)
            for name in ("mlp.gate.weight", "mlp.shared_expert_gate.weight",
                         "input_layernorm.weight", "post_attention_layernorm.weight"):
                want[p + name] = w[p + name]
        check_params(model, want)
        if ep and tp > 1:
            expert_map = model.model.layers[0].mlp.experts._expert_map
            assert [x for x in range(4) if expert_map[x] >= 0] == mine


@pytest.mark.parametrize("q_lora_rank", [24, None])
@pytest.mark.parametrize("tp", [1, 2, 4])
def test_deepseek_mla_load_weights_shards(tp, q_lora_rank):
    models, w = load(deepseek_mla, {"q_lora_rank": q_lora_rank}, tp)
    for r, model in enumerate(models):
        want = outer(w, r, tp)
        for i in range(2):
            p = f"model.layers.{i}."
            a = p + "self_attn."
            if q_lora_rank is not None:
                want[a + "fused_qkv_a_proj.weight"] = torch.cat(
                    [w[a + "q_a_proj.weight"], w[a + "kv_a_proj_with_mqa.weight"]])
                want[a + "q_a_layernorm.weight"] = w[a + "q_a_layernorm.weight"]
                want[a + "q_b_proj.weight"] = part(w[a + "q_b_proj.weight"], r, tp)
            else:
                want[a + "q_proj.weight"] = part(w[a + "q_proj.weight"], r, tp)
                want[a + "kv_a_proj_with_mqa.weight"] = w[a + "kv_a_proj_with_mqa.weight"]
            want[a + "kv_a_layernorm.weight"] = w[a + "kv_a_layernorm.weight"]
            want[a + "kv_b_proj.weight"] = part(w[a + "kv_b_proj.weight"], r, tp)
            want[a + "o_proj.weight"] = part(w[a + "o_proj.weight"], r, tp, 1)
            want.update(mlp_and_norms(w, p, r, tp))
        check_params(model, want)


@pytest.mark.parametrize("tp", [1, 2, 4])
def test_fp8_load_weights_shards(tp):
    models, w = load(fp8, {}, tp)
    block = 128
    for r, model in enumerate(models):
        want = outer(w, r, tp)
        kv_rank, kv_parts = r // max(1, tp // 2), min(tp, 2)
        for i in range(2):
            p = f"model.layers.{i}."
            a = p + "self_attn."
            q_w, k_w, v_w = (w[a + f"{x}_proj.weight"] for x in "qkv")
            want[a + "qkv_proj.weight"] = qkv(q_w, k_w, v_w, r, tp, num_kv_heads=2)
            want[a + "o_proj.weight"] = part(w[a + "o_proj.weight"], r, tp, 1)
            down = w[p + "mlp.down_proj.weight"].to(FP8)  # layer 0's arrives in bf16
            want[p + "mlp.down_proj.weight"] = part(down, r, tp, 1)
            if i == 0:  # per-tensor scales
                gate, up = w[p + "mlp.gate_up_proj.weight"].chunk(2)
                want[p + "mlp.gate_up_proj.weight"] = merged(gate, up, r, tp)
                for kind in ("weight_scale", "input_scale"):
                    want[a + "qkv_proj." + kind] = torch.stack(
                        [w[a + f"{x}_proj.{kind}"] for x in "qkv"])
                    want[a + "o_proj." + kind] = w[a + f"o_proj.{kind}"].reshape(1)
                    scale = w[p + f"mlp.gate_up_proj.{kind}"]
                    want[p + "mlp.gate_up_proj." + kind] = torch.stack([scale, scale])
                    want[p + "mlp.down_proj." + kind] = w[p + f"mlp.down_proj.{kind}"].reshape(1)
                want[a + "attn.k_scale"] = w[a + "k_proj.k_scale"]
                want[a + "attn.v_scale"] = w[a + "v_proj.v_scale"]
            else:  # block scales
                want[p + "mlp.gate_up_proj.weight"] = merged(
                    w[p + "mlp.gate_proj.weight"], w[p + "mlp.up_proj.weight"], r, tp)
                s = {x: w[a + f"{x}_proj.weight_scale_inv"] for x in "qkvo"}
                assert s["q"].shape == (cdiv(512, block), cdiv(320, block))
                want[a + "qkv_proj.weight_scale_inv"] = torch.cat(
                    [part(s["q"], r, tp), part(s["k"], kv_rank, kv_parts),
                     part(s["v"], kv_rank, kv_parts)])
                want[a + "o_proj.weight_scale_inv"] = part(s["o"], r, tp, 1)
                want[p + "mlp.gate_up_proj.weight_scale_inv"] = merged(
                    w[p + "mlp.gate_proj.weight_scale_inv"], w[p + "mlp.up_proj.weight_scale_inv"],
                    r, tp)
                want[p + "mlp.down_proj.weight_scale_inv"] = part(
                    w[p + "mlp.down_proj.weight_scale_inv"], r, tp, 1)
            for norm in ("input_layernorm", "post_attention_layernorm"):
                want[p + norm + ".weight"] = w[p + norm + ".weight"]
        check_params(model, want)


# ----------------------------------------------------------- load plans


def llama_kinds(metas, tp, rank, tied=True):
    return {m.name: "unneeded" if tied and m.name == "lm_head.weight" else "direct"
            for m in metas}


def qwen2_moe_kinds(metas, tp, rank, ep=False):
    mine = set(local_experts(4, rank, tp, ep))
    kinds = {}
    for m in metas:
        parts = m.name.split(".")
        if "experts" in parts and int(parts[parts.index("experts") + 1]) not in mine:
            kinds[m.name] = "unneeded"
        else:
            kinds[m.name] = "direct"
    return kinds


def deepseek_kinds(metas, tp, rank, num_layers=2):
    mtp = f"model.layers.{num_layers}."
    return {m.name: "unneeded" if m.name.startswith(mtp) else "direct" for m in metas}


FP8_REASONS = {
    "k_scale": ("reads its values",),
    "v_scale": ("reads its values",),
}


def fp8_kinds(metas, tp, rank):
    return {m.name: "fallback" if m.name.endswith(("k_scale", "v_scale")) else "direct"
            for m in metas}


CASES = {
    "llama": (llama, {}, llama_kinds),
    "llama-untied": (llama, {"tie_word_embeddings": False},
                     lambda m, tp, r: llama_kinds(m, tp, r, tied=False)),
    "llama-kv1-bias": (llama, {"num_kv_heads": 1, "attention_bias": True}, llama_kinds),
    "qwen2_moe": (qwen2_moe, {}, qwen2_moe_kinds),
    "qwen2_moe-ep": (qwen2_moe, {"enable_expert_parallel": True},
                     lambda m, tp, r: qwen2_moe_kinds(m, tp, r, ep=True)),
    "deepseek_mla": (deepseek_mla, {}, deepseek_kinds),
    "deepseek_mla-lite": (deepseek_mla, {"q_lora_rank": None}, deepseek_kinds),
    "fp8": (fp8, {}, fp8_kinds),
}


@pytest.mark.parametrize("tp,rank", TP_RANKS, ids=[f"tp{tp}-rank{r}" for tp, r in TP_RANKS])
@pytest.mark.parametrize("case", list(CASES))
def test_example_plan_and_verify(case, tp, rank):
    module, kw, kinds_of = CASES[case]
    model, metas = module.make(rank, tp, **kw)
    plan = loadplan.plan_loads(model, metas)
    want = kinds_of(metas, tp, rank)
    got = {name: entry.kind for name, entry in plan.entries.items()}
    why = {name: entry.reason for name, entry in plan.entries.items() if entry.reason}
    assert got == want, f"{ {n: (got[n], want[n]) for n in got if got[n] != want.get(n)} }; {why}"
    for name, entry in plan.entries.items():
        if entry.kind != "fallback":
            continue
        for suffix, subs in FP8_REASONS.items():
            if name.endswith(suffix):
                for sub in subs:
                    assert sub in entry.reason, (name, entry.reason)
    result = loadplan.verify(lambda: module.make(rank, tp, **kw)[0], metas)
    assert result.ok, result
    assert bool(result)


@pytest.mark.parametrize("tp", [2, 4])
def test_llama_direct_names_need_only_their_rank_part(tp):
    # every rank's boxes of a row-parallel weight tile the checkpoint once
    shape = None
    cover = None
    for rank in range(tp):
        model, metas = llama.make(rank, tp)
        plan = loadplan.plan_loads(model, metas)
        name = "model.layers.0.self_attn.o_proj.weight"
        shape = next(m.shape for m in metas if m.name == name)
        cover = torch.zeros(shape, dtype=torch.int32) if cover is None else cover
        for box in plan.get_boxes(name):
            cover[tuple(slice(int(a), int(b)) for a, b in box)] += 1
    assert torch.equal(cover, torch.ones(shape, dtype=torch.int32))

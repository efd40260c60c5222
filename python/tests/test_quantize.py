"""Quantizing on the trainer: ``Sender(quantize=...)`` sends the fp8 blocks
and float32 scales of bf16 trainer tensors to an fp8 engine.

The quantizer must equal, byte for byte, a straightforward per-block
reference written here and vLLM's own block quantization (where vLLM is
installed), on random values and on zeros, infinities, NaN, subnormals and
values past fp8's range. Between 2 TP-sharded senders and 2 TP receivers
over Gloo, each receiver's fp8 model must equal a reference that ran
``load_weights`` on the reference-quantized checkpoint, with every name
direct and fp8's bytes (not bf16's) on the wire; a sender whose box cuts a
128x128 block fails every rank's set-up before anything is sent.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from loadplan.transfer import fp8_block_scales, free_port, quantize_blocks, quantized_metadata
from loadplan.transfer.quantize import plan_quantized

from test_transfer import _mismatch, _rendezvous, launch_ranks

FP8 = torch.float8_e4m3fn


def reference_quantize(x: torch.Tensor, dtype=FP8, block=(128, 128)):
    """Block by block, as the format says: scale = max(amax, 1e-4) / max,
    q = (block * (1 / scale)) rounded to ``dtype``."""
    bn, bk = block
    n, k = x.shape
    q = torch.empty(n, k, dtype=dtype)
    scales = torch.empty(-(-n // bn), -(-k // bk), dtype=torch.float32)
    top = torch.finfo(dtype).max
    for i in range(0, n, bn):
        for j in range(0, k, bk):
            b = x[i:i + bn, j:j + bk].float()
            scale = b.abs().max().clamp(min=1e-4) / top
            q[i:i + bn, j:j + bk] = (b * (1.0 / scale)).to(dtype)
            scales[i // bn, j // bk] = scale
    return q, scales


def bits(t: torch.Tensor) -> torch.Tensor:
    return t.contiguous().view(torch.uint8)


def hard_values(n: int, k: int, dtype: torch.dtype, seed: int) -> torch.Tensor:
    """Random values of several magnitudes per block, an all-zero block,
    subnormals, and values past fp8's range."""
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(n, k, generator=g) * torch.logspace(-6, 6, k).roll(seed)
    x[:128, :128] = 0.0
    if n > 128 and k > 128:
        x[128:, :64] *= 1e-40  # float32 subnormals; 0 in fp16
        x[130, 3] = 1e30  # past fp8's range before scaling
    return x.to(dtype)


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16, torch.float32])
@pytest.mark.parametrize("fp8", [torch.float8_e4m3fn, torch.float8_e5m2])
@pytest.mark.parametrize("shape", [(300, 200), (128, 256), (1, 5), (257, 129)])
def test_quantize_blocks_equals_the_reference(dtype, fp8, shape):
    x = hard_values(*shape, dtype, seed=shape[0])
    q, s = quantize_blocks(x, fp8)
    rq, rs = reference_quantize(x, fp8)
    assert q.dtype == fp8 and s.dtype == torch.float32
    assert s.shape == rs.shape
    assert torch.equal(bits(q), bits(rq))
    assert torch.equal(bits(s), bits(rs))


def test_infinities_and_nan_poison_their_block_only():
    x = hard_values(256, 256, torch.float32, seed=3)
    x[5, 5] = float("inf")
    x[200, 7] = float("nan")
    x[7, 200] = -float("inf")
    q, s = quantize_blocks(x)
    rq, rs = reference_quantize(x)
    assert torch.isinf(s[0, 0]) and torch.isnan(s[1, 0]) and torch.isinf(s[0, 1])
    assert torch.equal(s.isnan(), rs.isnan())
    assert torch.equal(bits(s[~s.isnan()]), bits(rs[~rs.isnan()]))
    # A NaN's sign bit is the kernel's choice (torch's own vector and
    # scalar paths differ); every other byte is exact.
    nan = rq.float().isnan()
    assert torch.equal(q.float().isnan(), nan)
    assert torch.equal(bits(q)[~nan], bits(rq)[~nan])
    assert nan[:128, :128].sum() == 1 and nan[128:, :128].all() and not nan[128:, 128:].any()


@pytest.mark.parametrize("shape", [(300, 200), (512, 320), (64, 700)])
def test_quantize_blocks_equals_vllm(shape):
    deep_gemm = pytest.importorskip("vllm.utils.deep_gemm")
    # The function vLLM compiles; its Python body is what it runs.
    fn = getattr(deep_gemm.per_block_cast_to_fp8, "_torchdynamo_orig_callable",
                 deep_gemm.per_block_cast_to_fp8)
    x = hard_values(*shape, torch.bfloat16, seed=7)
    x[3, 3] = float("inf")
    q, s = quantize_blocks(x)
    vq, vs = fn(x, [128, 128])
    assert vq.dtype == FP8
    assert torch.equal(bits(q), bits(vq))
    assert torch.equal(bits(s), bits(vs))


def test_fp8_block_scales_finds_the_pairs():
    from loadplan.examples import fp8

    _, metadata = fp8.make(bf16_names=())
    pairs = fp8_block_scales(metadata)
    # Layer 1 is block-scaled: its 6 projections; layer 0 has per-tensor scales.
    assert sorted(pairs) == sorted(
        f"model.layers.1.{p}.weight" for p in ("self_attn.q_proj", "self_attn.k_proj",
                                                "self_attn.v_proj", "self_attn.o_proj",
                                                "mlp.gate_proj", "mlp.up_proj",
                                                "mlp.down_proj"))
    assert all(s == w + "_scale_inv" for w, s in pairs.items())


def test_quantized_metadata_declares_what_fp8_block_scales_finds():
    from loadplan import ParamMeta

    bf16 = [ParamMeta("w", (300, 200), torch.bfloat16), ParamMeta("norm", (200,), torch.float32),
            ParamMeta("v", (128, 256), torch.float16)]
    declared, quantize = quantized_metadata(bf16, ["v", "w"])
    assert [(m.name, tuple(m.shape), m.dtype) for m in declared] == [
        ("w", (300, 200), FP8), ("w_scale_inv", (3, 2), torch.float32),
        ("norm", (200,), torch.float32),
        ("v", (128, 256), FP8), ("v_scale_inv", (1, 2), torch.float32)]
    assert quantize == fp8_block_scales(declared) == {"w": "w_scale_inv", "v": "v_scale_inv"}
    for names, metas, match in [
            (["norm"], bf16, "2-D"), (["x"], bf16, "does not declare"),
            (["w"], bf16 + [ParamMeta("w_scale_inv", (3, 2), torch.float32)], "declared already"),
            (["w"], [ParamMeta("w", (4, 4), torch.int8)], "2-D")]:
        with pytest.raises(ValueError, match=match):
            quantized_metadata(metas, names)


def test_holdings_that_cut_a_block_or_the_scales_are_refused():
    from loadplan.examples import fp8

    _, metadata = fp8.make(bf16_names=())
    metas = {m.name: m for m in metadata}
    pairs = fp8_block_scales(metadata)
    q = "model.layers.1.self_attn.q_proj.weight"  # [512, 320]
    holdings = {q: ((0, 256), (0, 320))}
    [got] = plan_quantized(metas, holdings, {q: pairs[q]}, (128, 128))
    # 320 columns end the tensor: its last block is cut by the end only.
    assert holdings[pairs[q]] == ((0, 2), (0, 3)) == got.scale_held
    with pytest.raises(ValueError, match=r"cuts a 128x128 block \(rows 0\.\.100 of 512\)"):
        plan_quantized(metas, {q: ((0, 100), (0, 320))}, {q: pairs[q]}, (128, 128))
    with pytest.raises(ValueError, match=r"cuts a 128x128 block \(columns 64\.\.320 of 320\)"):
        plan_quantized(metas, {q: ((0, 128), (64, 320))}, {q: pairs[q]}, (128, 128))
    with pytest.raises(ValueError, match="holds 'model.layers.1.self_attn.q_proj.weight_scale"
                                         "_inv' but not"):
        plan_quantized(metas, {pairs[q]: None}, {q: pairs[q]}, (128, 128))
    with pytest.raises(ValueError, match=r"but the blocks of .* it holds give \(\(0, 2\)"):
        plan_quantized(metas, {q: ((0, 256), (0, 320)), pairs[q]: None}, {q: pairs[q]},
                       (128, 128))
    with pytest.raises(ValueError, match="a block-quantized weight is 2-D"):
        plan_quantized(metas, {}, {"model.norm.weight": pairs[q]}, (128, 128))


# ---------------------------------------------------------------------------
# 2 senders, 2 receivers over Gloo

SENDERS, RECEIVERS = 2, 2


def _trainer_weights(metadata, pairs: dict, seed: int) -> dict[str, torch.Tensor]:
    """The trainer's full tensors: bf16 for the names it quantizes, the
    checkpoint's own for the others."""
    from loadplan.verification import random_weights

    out = dict(random_weights([m for m in metadata if m.name not in pairs.values()], seed))
    for k, (name, t) in enumerate(sorted((n, out[n]) for n in pairs)):
        out[name] = hard_values(*t.shape, torch.bfloat16, seed=seed * 100 + k)
    return out


def _engine_checkpoint(trainer: dict, pairs: dict) -> dict[str, torch.Tensor]:
    """What the trainer's weights are in the fp8 checkpoint, by the reference."""
    out = dict(trainer)
    for weight, scale in pairs.items():
        out[weight], out[scale] = reference_quantize(trainer[weight])
    return out


def _tp_box(name: str, shape, index: int):
    from loadplan.transfer import shard_box

    if name.endswith("_scale_inv") or len(shape) != 2:
        return None
    if any(p in name for p in ("q_proj", "k_proj", "v_proj", "gate_proj", "up_proj")):
        return shard_box(shape, 0, index, SENDERS)
    if any(p in name for p in ("o_proj", "down_proj")):
        return shard_box(shape, 1, index, SENDERS)
    return None


def _rank_main(rank: int, tmp: str, ports: list[int]) -> None:
    import json
    import os

    import loadplan
    from loadplan.examples import fp8
    from loadplan.verification import copy_bytes

    torch.set_num_threads(1)
    world = SENDERS + RECEIVERS
    _, metadata = fp8.make(bf16_names=())
    pairs = fp8_block_scales(metadata)
    common = dict(rank=rank, world_size=world, num_senders=SENDERS, timeout=30.0,
                  num_threads=1)
    result: dict = {"role": "sender" if rank < SENDERS else "receiver", "engines": {}}
    if rank < SENDERS:
        holdings = {m.name: _tp_box(m.name, m.shape, rank) for m in metadata
                    if m.name not in pairs.values()}
    else:
        reference, _ = fp8.make(rank - SENDERS, RECEIVERS, bf16_names=())
        model, _ = fp8.make(rank - SENDERS, RECEIVERS, bf16_names=())
        copy_bytes(reference, model)
        plan = loadplan.plan_loads(model, metadata)
        result["not_direct"] = sorted(n for n, e in plan.entries.items() if e.kind != "direct")
        result["needed"] = sum(e.nbytes for e in plan.entries.values())
    for engine, port in zip(("m_to_n", "sliced"), ports):
        out = result["engines"][engine] = {"bytes": 0, "mismatch": None}
        meet = _rendezvous("tcp_store", rank, world, f"{tmp}/{engine}", port)
        if rank < SENDERS:
            end = loadplan.Sender(metadata, holdings=holdings, engine=engine, quantize=pairs,
                                  **common, **meet)
        else:
            end = loadplan.Receiver(model, plan, engine=engine, **common, **meet)
        with end:
            for seed in (31, 32):
                trainer = _trainer_weights(metadata, pairs, seed)
                if rank < SENDERS:
                    parts = {n: t if holdings[n] is None else
                             t[tuple(slice(a, b) for a, b in holdings[n])]
                             for n, t in trainer.items() if n in holdings}
                    out["bytes"] += end.send(parts).bytes_sent
                else:
                    out["bytes"] += end.receive().bytes_received
                    with torch.no_grad():
                        reference.load_weights(list(_engine_checkpoint(trainer, pairs).items()))
                    out["mismatch"] = out["mismatch"] or _mismatch(reference, model)
    # A sender whose box cuts a block: every rank's set-up fails with why.
    meet = _rendezvous("tcp_store", rank, world, f"{tmp}/bad", ports[2])
    try:
        if rank < SENDERS:
            bad = dict(holdings)
            q = "model.layers.1.self_attn.q_proj.weight"
            if rank == 1:
                bad[q] = ((200, 512), (0, 320))
            loadplan.Sender(metadata, holdings=bad, engine="m_to_n", quantize=pairs, **common,
                            **meet).close()
        else:
            loadplan.Receiver(model, plan, engine="m_to_n", **common, **meet).close()
        result["refused"] = None
    except (ValueError, loadplan.TransferError) as e:
        result["refused"] = f"{type(e).__name__}: {e}"
    Path(tmp, f"rank{rank}.json").write_text(json.dumps(result))
    os._exit(0)


def test_quantizing_senders_feed_fp8_receivers_exactly(tmp_path):
    ports = [free_port() for _ in range(3)]
    code = f"import test_quantize as t; t._rank_main({{rank}}, {str(tmp_path)!r}, {ports})"
    results = launch_ranks(SENDERS + RECEIVERS, code, tmp_path, "quantize")
    receivers = [r for r in results if r["role"] == "receiver"]
    senders = [r for r in results if r["role"] == "sender"]
    needed = sum(r["needed"] for r in receivers)
    for r in receivers:
        # Only the KV-cache scales of layer 0 (a value read) go to
        # load_weights; every quantized name and its scales are direct.
        assert r["not_direct"] == ["model.layers.0.self_attn.k_proj.k_scale",
                                   "model.layers.0.self_attn.v_proj.v_scale"]
    for engine in ("m_to_n", "sliced"):
        for r in receivers:
            assert r["engines"][engine]["mismatch"] is None, (engine, r["engines"][engine])
        # fp8 and scale bytes, two updates: what the plans need, not bf16's.
        assert sum(r["engines"][engine]["bytes"] for r in receivers) == 2 * needed
        assert sum(r["engines"][engine]["bytes"] for r in senders) == 2 * needed
    assert results[1]["refused"].startswith(
        "ValueError: load plan: 'model.layers.1.self_attn.q_proj.weight': the held box "
        "[[200, 512], [0, 320]] cuts a 128x128 block (rows 200..512 of 512)")
    for r in results[:1] + results[2:]:
        assert r["refused"].startswith("TransferError") and "cuts a 128x128 block" in \
            r["refused"], r["refused"]

#!/usr/bin/env python3
"""Writes the captured loader of a DeepSeek-V3-sized model as loadplan IR.

What vLLM's DeepSeek-V3 loader does at tensor parallelism 8, rank 3, with fp8
weights and 128x128 block scales: MLA attention (q_a and kv_a fused into one
replicated fused_qkv_a_proj; q_b and kv_b column-parallel; o_proj
row-parallel), 256 routed experts per MoE layer TP-sharded into fused
w13/w2 parameters (one copy per expert tensor), one shared expert (merged
gate_up, row-parallel down), dense MLPs in the first 3 layers, and a
vocab-parallel embedding and lm_head. At 61 layers this is about 90k copies.

    bench/gen_deepseek.py --layers 61 -o deepseek.mlir
"""

import argparse
import sys

HIDDEN = 7168
Q_LORA = 1536
KV_LORA = 512
ROPE = 64
NOPE = 128
V_HEAD = 128
HEADS = 128
MOE_INTER = 2048
DENSE_INTER = 18432
VOCAB = 129280
EXPERTS = 256
DENSE_LAYERS = 3
BLOCK = 128

FP8 = "f8E4M3FN"
ITEM = {FP8: 1, "bf16": 2, "f32": 4}


def cdiv(a: int, b: int) -> int:
    return -(-a // b)


class Writer:
    def __init__(self, out, tp_size: int, tp_rank: int):
        self.out = out
        self.tp = tp_size
        self.rank = tp_rank
        self.copies = 0
        self.n = 0

    def target(self, module: str, tensor: str, shape, dtype: str) -> str:
        """Declares a parameter in its own storage; returns its symbol."""
        sym = f"t{self.n}"
        self.n += 1
        stride = [1] * len(shape)
        for k in range(len(shape) - 2, -1, -1):
            stride[k] = stride[k + 1] * shape[k + 1]
        numel = 1
        for d in shape:
            numel *= d
        w = self.out.write
        w(f"  loadplan.storage @s_{sym} size {numel * ITEM[dtype]}\n")
        w(
            f'  loadplan.target @{sym} module "{module}" tensor "{tensor}" '
            f"storage @s_{sym} byte_offset 0 stride [{', '.join(map(str, stride))}]"
            f" : tensor<{'x'.join(map(str, shape))}x{dtype}>\n"
        )
        return sym

    def load(self, name: str, shape, dtype: str, sym: str, src_slices, dest):
        """One checkpoint: slices of the incoming tensor (dim, start, end),
        then a copy into `dest` = (offset, shape, stride) of target `sym`."""
        ty = lambda s: f"tensor<{'x'.join(map(str, s)) + 'x' if s else ''}{dtype}>"
        w = self.out.write
        w(f'  loadplan.checkpoint "{name}" : {ty(shape)} (%w) {{\n')
        cur, val = list(shape), "%w"
        for i, (dim, start, end) in enumerate(src_slices):
            nxt = list(cur)
            nxt[dim] = end - start
            w(
                f"    %{i} = loadplan.slice {val} dim {dim} start {start} end {end} "
                f"step 1 : {ty(cur)} -> {ty(nxt)}\n"
            )
            cur, val = nxt, f"%{i}"
        offset, dshape, dstride = dest
        w(
            f"    loadplan.copy {val} to @{sym} <offset = {offset}, shape = "
            f"[{', '.join(map(str, dshape))}], stride = [{', '.join(map(str, dstride))}]>"
            f" as {dtype} : {ty(cur)}\n  }}\n"
        )
        self.copies += 1

    def shard(self, size: int) -> tuple[int, int]:
        part = size // self.tp
        return part * self.rank, part * (self.rank + 1)


def column(wr: Writer, name: str, module: str, rows: int, cols: int):
    """A column-parallel fp8 linear with its block scale."""
    r0, r1 = wr.shard(rows)
    sym = wr.target(module, "weight", [r1 - r0, cols], FP8)
    wr.load(f"{name}.weight", [rows, cols], FP8, sym, [(0, r0, r1)],
            (0, [r1 - r0, cols], [cols, 1]))
    srows, scols = cdiv(rows, BLOCK), cdiv(cols, BLOCK)
    s0, s1 = wr.shard(srows)
    sym = wr.target(module, "weight_scale_inv", [s1 - s0, scols], "f32")
    wr.load(f"{name}.weight_scale_inv", [srows, scols], "f32", sym,
            [(0, s0, s1)], (0, [s1 - s0, scols], [scols, 1]))


def row(wr: Writer, name: str, module: str, rows: int, cols: int):
    """A row-parallel fp8 linear with its block scale."""
    c0, c1 = wr.shard(cols)
    sym = wr.target(module, "weight", [rows, c1 - c0], FP8)
    wr.load(f"{name}.weight", [rows, cols], FP8, sym, [(1, c0, c1)],
            (0, [rows, c1 - c0], [c1 - c0, 1]))
    srows, scols = cdiv(rows, BLOCK), cdiv(cols, BLOCK)
    s0, s1 = wr.shard(scols)
    sym = wr.target(module, "weight_scale_inv", [srows, s1 - s0], "f32")
    wr.load(f"{name}.weight_scale_inv", [srows, scols], "f32", sym,
            [(1, s0, s1)], (0, [srows, s1 - s0], [s1 - s0, 1]))


def norm(wr: Writer, name: str, module: str, size: int):
    sym = wr.target(module, "weight", [size], "bf16")
    wr.load(f"{name}.weight", [size], "bf16", sym, [], (0, [size], [1]))


def merged_column(wr: Writer, prefix: str, module: str, inter: int):
    """gate_proj and up_proj into one column-parallel gate_up_proj."""
    part = inter // wr.tp
    sym = wr.target(module, "weight", [2 * part, HIDDEN], FP8)
    sparts = cdiv(inter, BLOCK) // wr.tp
    ssym = wr.target(module, "weight_scale_inv", [2 * sparts, cdiv(HIDDEN, BLOCK)], "f32")
    r0, r1 = wr.shard(inter)
    s0, s1 = wr.shard(cdiv(inter, BLOCK))
    scols = cdiv(HIDDEN, BLOCK)
    for i, proj in enumerate(("gate_proj", "up_proj")):
        wr.load(f"{prefix}.{proj}.weight", [inter, HIDDEN], FP8, sym, [(0, r0, r1)],
                (i * part * HIDDEN, [part, HIDDEN], [HIDDEN, 1]))
        wr.load(f"{prefix}.{proj}.weight_scale_inv", [cdiv(inter, BLOCK), scols], "f32",
                ssym, [(0, s0, s1)], (i * sparts * scols, [sparts, scols], [scols, 1]))


def layer(wr: Writer, i: int):
    p = f"model.layers.{i}"
    a = f"{p}.self_attn"
    # q_a and kv_a fused, replicated on every rank.
    rows = Q_LORA + KV_LORA + ROPE
    sym = wr.target(f"{a}.fused_qkv_a_proj", "weight", [rows, HIDDEN], FP8)
    ssym = wr.target(f"{a}.fused_qkv_a_proj", "weight_scale_inv",
                     [cdiv(Q_LORA, BLOCK) + cdiv(KV_LORA + ROPE, BLOCK), cdiv(HIDDEN, BLOCK)], "f32")
    scols = cdiv(HIDDEN, BLOCK)
    wr.load(f"{a}.q_a_proj.weight", [Q_LORA, HIDDEN], FP8, sym, [],
            (0, [Q_LORA, HIDDEN], [HIDDEN, 1]))
    wr.load(f"{a}.q_a_proj.weight_scale_inv", [cdiv(Q_LORA, BLOCK), scols], "f32", ssym, [],
            (0, [cdiv(Q_LORA, BLOCK), scols], [scols, 1]))
    wr.load(f"{a}.kv_a_proj_with_mqa.weight", [KV_LORA + ROPE, HIDDEN], FP8, sym, [],
            (Q_LORA * HIDDEN, [KV_LORA + ROPE, HIDDEN], [HIDDEN, 1]))
    kvs = cdiv(KV_LORA + ROPE, BLOCK)
    wr.load(f"{a}.kv_a_proj_with_mqa.weight_scale_inv", [kvs, scols], "f32", ssym, [],
            (cdiv(Q_LORA, BLOCK) * scols, [kvs, scols], [scols, 1]))
    norm(wr, f"{a}.q_a_layernorm", f"{a}.q_a_layernorm", Q_LORA)
    norm(wr, f"{a}.kv_a_layernorm", f"{a}.kv_a_layernorm", KV_LORA)
    column(wr, f"{a}.q_b_proj", f"{a}.q_b_proj", HEADS * (NOPE + ROPE), Q_LORA)
    column(wr, f"{a}.kv_b_proj", f"{a}.kv_b_proj", HEADS * (NOPE + V_HEAD), KV_LORA)
    row(wr, f"{a}.o_proj", f"{a}.o_proj", HIDDEN, HEADS * V_HEAD)
    norm(wr, f"{p}.input_layernorm", f"{p}.input_layernorm", HIDDEN)
    norm(wr, f"{p}.post_attention_layernorm", f"{p}.post_attention_layernorm", HIDDEN)
    if i < DENSE_LAYERS:
        merged_column(wr, f"{p}.mlp", f"{p}.mlp.gate_up_proj", DENSE_INTER)
        row(wr, f"{p}.mlp.down_proj", f"{p}.mlp.down_proj", HIDDEN, DENSE_INTER)
        return
    m = f"{p}.mlp"
    sym = wr.target(f"{m}.gate", "weight", [EXPERTS, HIDDEN], "bf16")
    wr.load(f"{m}.gate.weight", [EXPERTS, HIDDEN], "bf16", sym, [],
            (0, [EXPERTS, HIDDEN], [HIDDEN, 1]))
    sym = wr.target(f"{m}.gate", "e_score_correction_bias", [EXPERTS], "f32")
    wr.load(f"{m}.gate.e_score_correction_bias", [EXPERTS], "f32", sym, [],
            (0, [EXPERTS], [1]))
    merged_column(wr, f"{m}.shared_experts", f"{m}.shared_experts.gate_up_proj", MOE_INTER)
    row(wr, f"{m}.shared_experts.down_proj", f"{m}.shared_experts.down_proj", HIDDEN, MOE_INTER)
    # FusedMoE: experts TP-sharded along the intermediate dim.
    part = MOE_INTER // wr.tp
    sblk = cdiv(MOE_INTER, BLOCK)
    spart = sblk // wr.tp
    hblk = cdiv(HIDDEN, BLOCK)
    w13 = wr.target(f"{m}.experts", "w13_weight", [EXPERTS, 2 * part, HIDDEN], FP8)
    w2 = wr.target(f"{m}.experts", "w2_weight", [EXPERTS, HIDDEN, part], FP8)
    s13 = wr.target(f"{m}.experts", "w13_weight_scale_inv", [EXPERTS, 2 * spart, hblk], "f32")
    s2 = wr.target(f"{m}.experts", "w2_weight_scale_inv", [EXPERTS, hblk, spart], "f32")
    r0, r1 = wr.shard(MOE_INTER)
    b0, b1 = wr.shard(sblk)
    for e in range(EXPERTS):
        x = f"{m}.experts.{e}"
        for j, proj in enumerate(("gate_proj", "up_proj")):
            wr.load(f"{x}.{proj}.weight", [MOE_INTER, HIDDEN], FP8, w13, [(0, r0, r1)],
                    ((e * 2 * part + j * part) * HIDDEN, [part, HIDDEN], [HIDDEN, 1]))
            wr.load(f"{x}.{proj}.weight_scale_inv", [sblk, hblk], "f32", s13, [(0, b0, b1)],
                    ((e * 2 * spart + j * spart) * hblk, [spart, hblk], [hblk, 1]))
        wr.load(f"{x}.down_proj.weight", [HIDDEN, MOE_INTER], FP8, w2, [(1, r0, r1)],
                (e * HIDDEN * part, [HIDDEN, part], [part, 1]))
        wr.load(f"{x}.down_proj.weight_scale_inv", [hblk, sblk], "f32", s2, [(1, b0, b1)],
                (e * hblk * spart, [hblk, spart], [spart, 1]))


def main(argv: list[str]) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--layers", type=int, default=61)
    ap.add_argument("--tp-size", type=int, default=8)
    ap.add_argument("--tp-rank", type=int, default=3)
    ap.add_argument("-o", "--output", default="-")
    args = ap.parse_args(argv)
    out = sys.stdout if args.output == "-" else open(args.output, "w")
    wr = Writer(out, args.tp_size, args.tp_rank)
    out.write("module {\n")
    v0, v1 = wr.shard(VOCAB)
    for name, module in (("model.embed_tokens.weight", "model.embed_tokens"),
                         ("lm_head.weight", "lm_head")):
        sym = wr.target(module, "weight", [v1 - v0, HIDDEN], "bf16")
        wr.load(name, [VOCAB, HIDDEN], "bf16", sym, [(0, v0, v1)],
                (0, [v1 - v0, HIDDEN], [HIDDEN, 1]))
    for i in range(args.layers):
        layer(wr, i)
    norm(wr, "model.norm", "model.norm", HIDDEN)
    out.write("}\n")
    if out is not sys.stdout:
        out.close()
    print(f"copies={wr.copies}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

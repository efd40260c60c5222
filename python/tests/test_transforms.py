"""Transforming writes (the plan format's ``transform``): a compiled plan
whose writes place a pack-quantized 4-bit MoE expert's atoms as vLLM's
Marlin kernels read them, at tensor parallelism 2, applied by the runtime
(``load_planned``) and by torch (``copy_with_torch``); each leaves the live
tensors equal to the Marlin repack (``gptq_marlin_repack``) of the rank's
zero-padded shard, the padding untouched."""

from __future__ import annotations

import pytest
import torch

from loadplan import planning
from loadplan.apply import copy_with_torch, load_planned
from loadplan.plan import LoadPlan
from loadplan.vllm import kernel_refs

TP = 2
N, K, H = 192, 64, 64  # intermediate (gate/up rows), hidden (their K), down rows
S = N // TP  # each rank's intermediate rows
P = 128  # padded (vLLM's marlin_moe_padded_intermediate for group 32)


class Experts(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.register_buffer("w13_weight_packed", torch.zeros(K // 16, 2 * 2 * P, dtype=torch.int32))
        self.register_buffer("w2_weight_packed", torch.zeros(P // 16, 2 * H, dtype=torch.int32))


class Model(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.experts = Experts()

    def load_weights(self, weights):  # the plan has no fallbacks
        raise AssertionError("no name falls back")


def _writes(target: str, size_n: int, size_k: int, segment: int, rows: int, box_row0: int,
            box_col0: int, cols: int) -> list[str]:
    """The transforming writes of the checkpoint box ``[box_row0:box_row0
    + rows, box_col0:box_col0 + cols]`` that lands at row ``segment``,
    word 0, of the repacked [size_n, size_k / 8] weight."""
    out = []
    for r in kernel_refs.marlin_w4_regions(size_n, size_k, segment, 0, rows, cols):
        row0 = box_row0 + r.row0 - segment
        out.append(
            f"loadplan.write @{target} box <[{row0}, {row0 + r.rows}], [{box_col0}, "
            f"{box_col0 + cols}]> region <offset = {r.offset}, shape = {list(r.size)}, "
            f'stride = {list(r.stride)}> transform "marlin_w4"')
    return out


def _ir(rank: int) -> str:
    lines = [
        "module {",
        f"loadplan.storage @s13 size {K // 16 * 4 * P * 4}",
        f"loadplan.storage @s2 size {P // 16 * 2 * H * 4}",
        f'loadplan.target @w13 module "experts" tensor "w13_weight_packed" storage @s13 '
        f"byte_offset 0 stride [{4 * P}, 1] : tensor<{K // 16}x{4 * P}xi32>",
        f'loadplan.target @w2 module "experts" tensor "w2_weight_packed" storage @s2 '
        f"byte_offset 0 stride [{2 * H}, 1] : tensor<{P // 16}x{2 * H}xi32>",
    ]
    # gate and up [N, K / 8]: this rank's S rows, each padded to P, gate
    # then up in w13.
    for half, name in enumerate(("gate_proj", "up_proj")):
        lines.append(f'loadplan.checkpoint "{name}" : tensor<{N}x{K // 8}xi32> (%w) {{')
        lines += _writes("w13", 2 * P, K, half * P, S, rank * S, 0, K // 8)
        lines.append("}")
    # down [H, N / 8]: this rank's S / 8 words of K, padded to P / 8.
    lines.append(f'loadplan.checkpoint "down_proj" : tensor<{H}x{N // 8}xi32> (%w) {{')
    lines += _writes("w2", H, P, 0, H, 0, rank * S // 8, S // 8)
    lines += ["}", "}"]
    return "\n".join(lines)


def _expected(weights: dict[str, torch.Tensor], rank: int) -> tuple[torch.Tensor, torch.Tensor]:
    """What vLLM's Marlin MoE processing makes of this rank's shards:
    each padded with zeros, then repacked (the references of
    ``gptq_marlin_repack``, checked against vLLM's in test_kernel_refs)."""
    rows = slice(rank * S, (rank + 1) * S)
    w13 = torch.cat([torch.nn.functional.pad(weights[n][rows], (0, 0, 0, P - S))
                     for n in ("gate_proj", "up_proj")])
    words = slice(rank * S // 8, (rank + 1) * S // 8)
    w2 = torch.nn.functional.pad(weights["down_proj"][:, words], (0, (P - S) // 8))
    return (kernel_refs.gptq_marlin_repack(w13.t().contiguous(), K, 2 * P, 4),
            kernel_refs.gptq_marlin_repack(w2.t().contiguous(), P, H, 4))


def _weights(seed: int) -> dict[str, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)

    def words(*shape):
        return torch.randint(-2**31, 2**31, shape, generator=g, dtype=torch.int64).to(torch.int32)

    return {"gate_proj": words(N, K // 8), "up_proj": words(N, K // 8),
            "down_proj": words(H, N // 8)}


@pytest.fixture(params=range(TP), ids=lambda r: f"rank{r}")
def planned(request, tmp_path):
    rank = request.param
    out = planning.compile_ir(_ir(rank), print_json=True)
    assert '"transform": "marlin_w4"' in out["json"]
    path = tmp_path / "plan"
    path.write_bytes(out["plan"])
    return rank, path


def test_runtime_and_torch_write_the_marlin_repack(planned):
    rank, path = planned
    by_runtime, by_torch = Model(), Model()
    # The padding's words, whatever the first load left there, are never
    # written: a sentinel in every word shows it.
    sentinel = 0x5A5A5A5A
    for model in (by_runtime, by_torch):
        for t in model.state_dict().values():
            t.fill_(sentinel)
    ones = {n: torch.full_like(t, -1) for n, t in _weights(0).items()}
    padding = [t == 0 for t in _expected(ones, rank)]  # words only padded rows fill
    assert 0 < int(padding[0].sum()) < padding[0].numel() and int(padding[1].sum()) > 0
    plan = LoadPlan.load(path, by_runtime)
    torch_plan = LoadPlan.load(path, by_torch)
    entry = plan.entries["gate_proj"]
    assert entry.kind == "direct" and {w.transform for w in entry.writes} == {"marlin_w4"}
    for seed in (1, 2, 3):  # several updates into the same live tensors
        weights = _weights(seed)
        load_planned(by_runtime, plan, weights.items())
        copy_with_torch(torch_plan, list(weights.items()))
        expected = [torch.where(pad, sentinel, t) for pad, t in zip(padding, _expected(weights, rank))]
        for model in (by_runtime, by_torch):
            assert torch.equal(model.experts.w13_weight_packed, expected[0])
            assert torch.equal(model.experts.w2_weight_packed, expected[1])


def test_a_bad_update_writes_nothing(planned):
    rank, path = planned
    model = Model()
    plan = LoadPlan.load(path, model)
    load_planned(model, plan, _weights(1).items())
    before = {k: v.clone() for k, v in model.state_dict().items()}
    bad = _weights(2)
    bad["down_proj"] = bad["down_proj"].to(torch.float32)
    with pytest.raises(ValueError, match="down_proj"):
        load_planned(model, plan, bad.items())
    for k, v in model.state_dict().items():
        assert torch.equal(v, before[k]), k

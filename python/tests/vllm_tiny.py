"""Tiny vLLM models on the CPU, for the tests and benchmarks (a test
fixture: no module of the package imports it).

vLLM's own model classes build on its CPU platform from tiny
``transformers`` configs: ``save`` writes a tiny Hugging Face model (its
safetensors header is the checkpoint), ``build`` makes vLLM's model for it
as vLLM's tests do (a fresh ``VllmConfig`` per instance, under
``set_current_vllm_config``, with the distributed state set up once per
process over Gloo), ``load`` loads and processes it as vLLM's loader does,
and ``vllm_reload`` is vLLM's own reload path, the reference an update is
compared with.

vLLM's PyPI wheel is a CUDA build: on the CPU its kernels (``vllm._C``) are
absent. Where post-load processing would call one, ``cpu_kernels`` makes
vLLM take the path it has for CPUs without them, or stands in for the one
kernel that has no such path:

- linear and embedding layers: vLLM's portable branch (``torch.nn.functional
  .linear`` on the weight as loaded), as on CPUs without AMX or oneDNN;
- MLA attention: vLLM's reference CPU backend (``CPU_MLA``), not AMX's;
- the CPU MoE prepack (``_C::prepack_moe_weight``): a stand-in, by default
  the unpacked layout (what GPU backends keep), or with
  ``moe_prepack="reversed"`` a layout that really differs from the
  checkpoint's, so that a test sees a layer whose processing changes it;
- with ``fp8=True``, fp8 block-quantized linear layers: vLLM's CPU fp8
  kernel is selected (``ops._supports_cpu_fp8_w8a16`` and AMX claimed), and
  its weight prepack (``_C::convert_weight_packed``), absent from the CUDA
  wheel, is a stand-in that keeps the checkpoint's layout (a copy). The
  GEMM itself is never run: these models are loaded, not run.

``save(..., fp8=True)`` writes the fp8 block-quantized checkpoint of a
model (every layer's ``*_proj.weight`` as float8_e4m3fn [N, K] with its
float32 ``*_proj.weight_scale_inv`` in 128x128 blocks, as Qwen3-FP8 and
DeepSeek-V3 ship them, ``quantize_blocks``' bytes) with its
``quantization_config``; ``save("gpt_oss", ..., mxfp4=True)`` gpt-oss's
experts as OpenAI's mxfp4 checkpoint holds them (4-bit blocks and
exponent scales, uint8).
"""

from __future__ import annotations

import glob
import os
from collections.abc import Iterable
from pathlib import Path

import torch

FAMILIES = ("llama", "qwen2", "qwen3", "qwen3_moe", "phi3", "deepseek_v2", "deepseek_v3",
            "gpt_oss", "mixtral", "bloom", "falcon", "falcon_mq")


def use_cpu_platform() -> None:
    """vLLM's CPU platform (set before vLLM picks one)."""
    os.environ.setdefault("VLLM_TARGET_DEVICE", "cpu")


_MOE_PREPACK: list[str] = []
_LIBRARIES: list = []  # the stand-ins' registrations, kept alive with the process
FP8_BLOCK = (128, 128)
# What save(fp8=True) quantizes: every linear of the decoder layers
# (DeepSeek's kv_a_proj_with_mqa too, which vLLM fuses with q_a_proj), but
# not an MTP layer's eh_proj, which DeepSeek ships bf16 (vLLM's is a plain
# nn.Linear).
FP8_WEIGHTS = ("model.layers.*[!h]_proj.weight", "model.layers.*_proj_with_mqa.weight")


def _fp8_kernels() -> None:
    """vLLM's CPU fp8 block-quantized linear kernel, with a stand-in for its
    weight prepack where this build lacks it (see the module doc)."""
    import vllm._custom_ops as ops

    ops._supports_cpu_fp8_w8a16 = True
    torch.cpu._is_amx_tile_supported = lambda: True
    if hasattr(torch.ops._C, "convert_weight_packed"):
        return  # a vLLM build with its CPU kernels
    lib = torch.library.Library("_C", "FRAGMENT")
    lib.define("convert_weight_packed(Tensor weight) -> Tensor")
    lib.impl("convert_weight_packed", lambda weight: weight.clone(), "CPU")
    _LIBRARIES.append(lib)


def cpu_kernels(moe_prepack: str = "identity", *, fp8: bool = False) -> None:
    """Makes vLLM's post-load processing run on this CPU build (see the
    module doc); ``fp8``: also its fp8 block-quantized linear layers (an
    explicit opt-in: it claims AMX, which changes vLLM's choices). Once per
    process."""
    import vllm._custom_ops as ops
    import vllm.model_executor.layers.utils as layer_utils

    layer_utils.check_cpu_sgl_kernel = lambda *args, **kwargs: False
    ops._supports_onednn = False
    if fp8:
        _fp8_kernels()
    if _MOE_PREPACK:
        _MOE_PREPACK[0] = moe_prepack
        return
    _MOE_PREPACK.append(moe_prepack)
    if hasattr(torch.ops._C, "prepack_moe_weight"):
        return  # a vLLM build with its CPU kernels
    lib = torch.library.Library("_C", "FRAGMENT")
    lib.define("prepack_moe_weight(Tensor weight, Tensor(a!) output, str isa) -> ()")

    def prepack(weight: torch.Tensor, output: torch.Tensor, isa: str) -> None:
        output.copy_(weight.flip(-1) if _MOE_PREPACK[0] == "reversed" else weight)

    lib.impl("prepack_moe_weight", prepack, "CPU")
    _LIBRARIES.append(lib)


# DeepSeek-V3's MLA sizes (q LoRA, kv LoRA, rope, nope, v head dims) where
# every block-fp8 linear meets DeepGEMM's shapes (N % 64, K % 128).
MLA_FP8 = (128, 128, 64, 16, 32)


def hf_config(family: str, *, layers: int = 2, experts: int = 4, hidden: int = 64,
              intermediate: int = 128, heads: int = 4, kv_heads: int = 2, vocab: int = 256,
              mla: tuple[int, int, int, int, int] = (32, 16, 8, 16, 16)):
    """A tiny transformers config of ``family``; ``mla``: DeepSeek-V3's q
    LoRA, kv LoRA, rope, nope and v head dims."""
    import transformers

    common = dict(hidden_size=hidden, intermediate_size=intermediate,
                  num_hidden_layers=layers, num_attention_heads=heads,
                  num_key_value_heads=kv_heads, vocab_size=vocab, max_position_embeddings=128,
                  tie_word_embeddings=False)
    if family == "llama":
        return transformers.LlamaConfig(**common)
    if family == "qwen2":  # q, k and v with biases
        return transformers.Qwen2Config(**common)
    if family == "qwen3":
        return transformers.Qwen3Config(**common, head_dim=hidden // heads)
    if family == "phi3":  # fused qkv_proj and gate_up_proj in the checkpoint
        return transformers.Phi3Config(**common, pad_token_id=0)
    if family == "qwen3_moe":  # top-k renormalized, as Qwen3-MoE ships (and FlashInfer takes)
        return transformers.Qwen3MoeConfig(
            **common, head_dim=hidden // heads, moe_intermediate_size=intermediate // 2,
            num_experts=experts, num_experts_per_tok=2, decoder_sparse_step=1,
            mlp_only_layers=[], norm_topk_prob=True)
    if family == "mixtral":
        return transformers.MixtralConfig(**common, num_local_experts=experts,
                                          num_experts_per_tok=2)
    if family == "deepseek_v2":  # MLA without q_lora (q_proj), greedy routing
        return transformers.DeepseekV2Config(
            **{**common, "num_key_value_heads": heads}, moe_intermediate_size=intermediate // 2,
            n_routed_experts=experts, num_experts_per_tok=2, n_shared_experts=1,
            first_k_dense_replace=1, q_lora_rank=None, kv_lora_rank=16, qk_nope_head_dim=16,
            qk_rope_head_dim=8, v_head_dim=16, n_group=1, topk_group=1, topk_method="greedy")
    if family == "gpt_oss":  # bf16 experts with biases, loaded around the weight loaders
        return transformers.GptOssConfig(
            **{**common, "intermediate_size": hidden}, head_dim=hidden // heads,
            num_local_experts=experts, num_experts_per_tok=2, sliding_window=32,
            layer_types=["sliding_attention", "full_attention"] * (layers // 2)
            + ["sliding_attention"] * (layers % 2))
    if family == "deepseek_v3":
        return transformers.DeepseekV3Config(
            **{**common, "num_key_value_heads": heads}, moe_intermediate_size=intermediate // 2,
            n_routed_experts=experts, num_experts_per_tok=2, n_shared_experts=1,
            first_k_dense_replace=1, q_lora_rank=mla[0], kv_lora_rank=mla[1],
            qk_rope_head_dim=mla[2], qk_nope_head_dim=mla[3], v_head_dim=mla[4], n_group=1,
            topk_group=1, topk_method="noaux_tc", scoring_func="sigmoid")
    if family == "bloom":  # fused query_key_value, laid out per head (q, k, v of each)
        return transformers.BloomConfig(hidden_size=hidden, n_layer=layers, n_head=heads,
                                        vocab_size=vocab)  # tied, as Bloom ships
    if family in ("falcon", "falcon_mq"):
        # falcon: the new decoder architecture (Falcon-40B/180B), kv_heads
        # groups of (q per kv, k, v) in query_key_value; falcon_mq: one kv
        # head for all queries (Falcon-7B), replicated across TP ranks.
        new = family == "falcon"
        return transformers.FalconConfig(
            hidden_size=hidden, num_hidden_layers=layers, num_attention_heads=heads,
            num_kv_heads=kv_heads if new else 1, new_decoder_architecture=new,
            multi_query=not new, parallel_attn=True, bias=False, alibi=False,
            vocab_size=vocab, max_position_embeddings=128, tie_word_embeddings=False)
    raise ValueError(f"unknown family {family!r}; one of {FAMILIES}")


def save(family: str, directory: str | os.PathLike, *, seed: int = 0,
         dtype: torch.dtype = torch.bfloat16, fp8: bool = False, mxfp4: bool = False,
         int4: bool = False, mtp: bool = False, **sizes) -> Path:
    """Writes a tiny Hugging Face model of ``family`` (random weights) and
    returns its folder; ``fp8``: its fp8 block-quantized checkpoint (see
    the module doc; hidden and intermediate sizes a multiple of 128);
    ``mxfp4``: gpt-oss's experts as its mxfp4 checkpoints ship them
    (``_mxfp4_saved``); ``int4``: a MoE model's routed experts as Kimi-K2's
    int4 checkpoints ship them, a dense model's linears as W4A16 ones do
    (``_int4_saved``); ``mtp``: DeepSeek-V3 with
    its multi-token prediction layer (``_mtp_saved``)."""
    import transformers

    if mtp:
        sizes["layers"] = sizes.get("layers", 2) + 1  # the MTP layer's decoder
    config = hf_config(family, **sizes)
    config.torch_dtype = dtype
    torch.manual_seed(seed)
    model = transformers.AutoModelForCausalLM.from_config(config).to(dtype)
    directory = Path(directory)
    model.save_pretrained(directory)
    if mtp:
        _mtp_saved(directory, seed, dtype)
    if fp8:
        _quantize_saved(directory)
    if mxfp4:
        _mxfp4_saved(directory, seed)
    if int4:
        _int4_saved(directory, seed)
    return directory


def fp8_quantized(name: str, tensor: torch.Tensor) -> list[tuple[str, torch.Tensor]]:
    """One checkpoint tensor as ``save(fp8=True)`` writes it: a matching
    weight as its fp8 blocks and scales, any other as it is."""
    from fnmatch import fnmatchcase

    from loadplan.transfer import quantize_blocks

    if tensor.dim() != 2 or not any(fnmatchcase(name, p) for p in FP8_WEIGHTS):
        return [(name, tensor)]
    q, scale = quantize_blocks(tensor, torch.float8_e4m3fn, FP8_BLOCK)
    return [(name, q), (name + "_scale_inv", scale)]


def _rewrite(directory: Path, tensors: dict[str, torch.Tensor],
             quantization: dict | None) -> None:
    """The saved model's checkpoint replaced by ``tensors`` (one file), its
    config given ``quantization`` as its ``quantization_config`` (None:
    left as it is)."""
    import json

    from safetensors.torch import save_file

    for path in directory.glob("*.safetensors"):
        path.unlink()
    for path in directory.glob("*.safetensors.index.json"):
        path.unlink()
    save_file(tensors, str(directory / "model.safetensors"), metadata={"format": "pt"})
    config_path = directory / "config.json"
    config = json.loads(config_path.read_text())
    if quantization is not None:
        config["quantization_config"] = quantization
    config_path.write_text(json.dumps(config, indent=2))


def _quantize_saved(directory: Path) -> None:
    tensors = {}
    for name, t in checkpoint(directory):
        tensors.update(fp8_quantized(name, t))
    # A MoE router's gate stays bf16, as fp8 MoE checkpoints ship it.
    ignored = [name.removesuffix(".weight") for name in tensors
               if name.endswith("mlp.gate.weight")]
    _rewrite(directory, tensors, {
        "quant_method": "fp8", "activation_scheme": "dynamic", "fmt": "e4m3",
        "weight_block_size": list(FP8_BLOCK), **({"ignored_layers": ignored} if ignored else {})})


def _mxfp4_saved(directory: Path, seed: int) -> None:
    """gpt-oss's experts as OpenAI's mxfp4 checkpoint holds them: each
    ``gate_up_proj`` / ``down_proj`` (``[E, in, out]`` bf16) as
    ``*_blocks`` (uint8 ``[E, out, in/32, 16]``: 32 4-bit values per block)
    and ``*_scales`` (uint8 ``[E, out, in/32]``: a power-of-two exponent per
    block), random; the biases bf16; ``quant_method`` ``mxfp4``."""
    gen = torch.Generator().manual_seed(seed + 1)
    tensors = {}
    for name, t in checkpoint(directory):
        if not name.endswith(("mlp.experts.gate_up_proj", "mlp.experts.down_proj")):
            tensors[name] = t
            continue
        experts, inner, outer = t.shape
        tensors[name + "_blocks"] = torch.randint(0, 256, (experts, outer, inner // 32, 16),
                                                  dtype=torch.uint8, generator=gen)
        tensors[name + "_scales"] = torch.randint(120, 130, (experts, outer, inner // 32),
                                                  dtype=torch.uint8, generator=gen)
    if not any(n.endswith("_blocks") for n in tensors):
        raise ValueError(f"{directory}: no gpt-oss experts to write as mxfp4")
    _rewrite(directory, tensors, {
        "quant_method": "mxfp4", "modules_to_not_convert": [
            "model.layers.*.self_attn", "model.layers.*.mlp.router", "model.embed_tokens",
            "lm_head"]})


INT4_GROUP = 32  # the group size of save(int4=True)'s scales, Kimi-K2's


def _int4_saved(directory: Path, seed: int) -> None:
    """A MoE model's routed experts as Kimi-K2's int4 checkpoints
    (compressed-tensors, ``pack-quantized`` W4A16) hold them, or a dense
    model's every decoder linear, as W4A16 checkpoints of dense models do:
    each ``*_proj.weight`` ([N, K] bf16) as
    ``weight_packed`` (int32 [N, K/8]: eight 4-bit values along K per word,
    random), ``weight_scale`` (bf16 [N, K/32]: one per group of 32, random
    and positive) and ``weight_shape`` (int64 [N, K]); everything else
    (of a MoE model: attention, shared experts, dense MLPs, the router)
    bf16, as the checkpoint's ``ignore`` list says."""
    gen = torch.Generator().manual_seed(seed + 3)
    tensors = {}
    saved = checkpoint(directory)
    moe = any(".mlp.experts." in name for name, _ in saved)
    for name, t in saved:
        if not name.startswith("model.layers.") or not name.endswith("_proj.weight") or (
                moe and ".mlp.experts." not in name):
            tensors[name] = t
            continue
        stem = name.removesuffix(".weight")
        n, k = t.shape
        tensors[stem + ".weight_packed"] = torch.randint(
            -2**31, 2**31 - 1, (n, k // 8), dtype=torch.int32, generator=gen)
        tensors[stem + ".weight_scale"] = (
            torch.rand((n, k // INT4_GROUP), generator=gen) * 0.01 + 0.001).to(torch.bfloat16)
        tensors[stem + ".weight_shape"] = torch.tensor([n, k], dtype=torch.int64)
    if not any(n.endswith(".weight_packed") for n in tensors):
        raise ValueError(f"{directory}: no linear layers to write as int4")
    _rewrite(directory, tensors, {
        "quant_method": "compressed-tensors", "format": "pack-quantized",
        "quantization_status": "compressed",
        "config_groups": {"group_0": {
            "targets": ["Linear"], "input_activations": None, "output_activations": None,
            "weights": {"num_bits": 4, "type": "int", "symmetric": True, "strategy": "group",
                        "group_size": INT4_GROUP, "dynamic": False, "actorder": None,
                        "block_structure": None, "observer": "minmax", "observer_kwargs": {}}}},
        "ignore": ["lm_head", "re:.*self_attn.*", "re:.*shared_experts.*",
                   r"re:.*mlp\.(gate|up|gate_up|down)_proj.*"] if moe else ["lm_head"],
        "kv_cache_scheme": None})


def _mtp_saved(directory: Path, seed: int, dtype: torch.dtype) -> None:
    """DeepSeek-V3's checkpoint with one multi-token prediction layer, as
    DeepSeek ships it: the saved model's last decoder layer becomes layer
    ``num_hidden_layers`` (``num_nextn_predict_layers`` 1), with the MTP
    module's own tensors beside it (``enorm``, ``hnorm``, ``eh_proj``,
    ``shared_head.norm``, random) and its copies of the embedding and the
    LM head (``MTP_COPIES``)."""
    import json

    config_path = directory / "config.json"
    config = json.loads(config_path.read_text())
    if config.get("model_type") != "deepseek_v3":
        raise ValueError(f"{directory}: only DeepSeek-V3 has an MTP layer here")
    layer, hidden, vocab = (config["num_hidden_layers"] - 1, config["hidden_size"],
                            config["vocab_size"])
    gen = torch.Generator().manual_seed(seed + 2)
    tensors = dict(checkpoint(directory))
    prefix = f"model.layers.{layer}."
    for name, shape in (("enorm.weight", (hidden,)), ("hnorm.weight", (hidden,)),
                        ("eh_proj.weight", (hidden, 2 * hidden)),
                        ("shared_head.norm.weight", (hidden,))):
        tensors[prefix + name] = (torch.randn(shape, generator=gen) * 0.05).to(dtype)
    for name, copied in MTP_COPIES.items():
        tensors[prefix + name] = tensors[copied].clone()
    _rewrite(directory, tensors, None)
    config.update(num_hidden_layers=layer, num_nextn_predict_layers=1)
    config_path.write_text(json.dumps(config, indent=2))


def checkpoint(directory: str | os.PathLike) -> list[tuple[str, torch.Tensor]]:
    """The checkpoint tensors, in file order."""
    from safetensors import safe_open

    out = []
    for path in sorted(glob.glob(f"{directory}/*.safetensors")):
        with safe_open(path, "pt") as f:
            out += [(name, f.get_tensor(name)) for name in f.keys()]
    return out


_DISTRIBUTED: list[tuple[int, int]] = []


def init_distributed(tp_size: int, rank: int, init_method: str) -> None:
    """vLLM's distributed state over Gloo, once per process."""
    from vllm.config import VllmConfig, set_current_vllm_config
    from vllm.distributed import init_distributed_environment, initialize_model_parallel

    if _DISTRIBUTED:
        if _DISTRIBUTED[0] != (tp_size, rank):
            raise RuntimeError(f"this process is rank {_DISTRIBUTED[0][1]} of TP "
                               f"{_DISTRIBUTED[0][0]} already")
        return
    with set_current_vllm_config(VllmConfig()):
        init_distributed_environment(world_size=tp_size, rank=rank,
                                     distributed_init_method=init_method, local_rank=rank,
                                     backend="gloo")
        initialize_model_parallel(tp_size, 1)
    _DISTRIBUTED.append((tp_size, rank))


def build(directory: str | os.PathLike, *, tp_size: int = 1, rank: int = 0,
          init_method: str = "tcp://127.0.0.1:29531", expert_parallel: bool = False,
          dtype: torch.dtype = torch.bfloat16):
    """vLLM's model for the Hugging Face model in ``directory`` on this rank
    (not loaded): ``(vllm_config, model)``."""
    from vllm.config import (
        AttentionConfig,
        DeviceConfig,
        ModelConfig,
        ParallelConfig,
        VllmConfig,
        set_current_vllm_config,
    )
    from vllm.model_executor.model_loader.utils import initialize_model
    from vllm.utils.torch_utils import set_default_torch_dtype
    from vllm.v1.attention.backends.registry import AttentionBackendEnum

    init_distributed(tp_size, rank, init_method)
    model_config = ModelConfig(model=str(directory), skip_tokenizer_init=True,
                               dtype=dtype, enforce_eager=True)
    mla = getattr(model_config.hf_config, "kv_lora_rank", None) is not None
    vllm_config = VllmConfig(
        model_config=model_config, device_config=DeviceConfig("cpu"),
        parallel_config=ParallelConfig(tensor_parallel_size=tp_size,
                                       enable_expert_parallel=expert_parallel),
        attention_config=AttentionConfig(backend=AttentionBackendEnum.CPU_MLA) if mla
        else AttentionConfig())
    # What vLLM's worker sets: this rank's place in the parallel layout.
    vllm_config.parallel_config.rank = rank
    # vLLM caches rotary embeddings across models; several models in one
    # process (the engine's, its references) each get their own, so that a
    # reload of one (vLLM's, which may fail halfway) leaves the others be.
    from vllm.model_executor.layers import rotary_embedding

    rotary_embedding._ROPE_DICT.clear()
    with set_current_vllm_config(vllm_config), set_default_torch_dtype(dtype):
        model = initialize_model(vllm_config=vllm_config)
    return vllm_config, model


def build_draft(vllm_config):
    """The MTP draft model vLLM's speculative decoder runs beside the
    model of ``vllm_config`` (not loaded): ``(draft_model_config,
    draft)``. ``vllm_config`` gains the speculative config."""
    from vllm.config import SpeculativeConfig, set_current_vllm_config
    from vllm.model_executor.model_loader.utils import initialize_model
    from vllm.utils.torch_utils import set_default_torch_dtype

    spec = SpeculativeConfig(method="mtp", num_speculative_tokens=1,
                             target_model_config=vllm_config.model_config,
                             target_parallel_config=vllm_config.parallel_config)
    vllm_config.speculative_config = spec
    draft_config = spec.draft_model_config
    with set_current_vllm_config(vllm_config), set_default_torch_dtype(draft_config.dtype):
        draft = initialize_model(vllm_config=vllm_config, model_config=draft_config)
    return draft_config, draft


def share_with_target(vllm_config, draft: torch.nn.Module, model: torch.nn.Module) -> None:
    """What vLLM's proposer does once the draft is loaded, through its own
    code: the draft's embedding and LM heads (``embed_tokens``, each MTP
    layer's ``shared_head.head``) become the target model's."""
    from types import SimpleNamespace

    from vllm.config import set_current_vllm_config
    from vllm.v1.spec_decode.llm_base_proposer import SpecDecodeBaseProposer

    proposer = SimpleNamespace(model=draft, vllm_config=vllm_config,
                               use_local_argmax_reduction=False)
    with set_current_vllm_config(vllm_config):
        SpecDecodeBaseProposer._maybe_share_embeddings(proposer, model)
        SpecDecodeBaseProposer._maybe_share_lm_head(proposer, model)


# The MTP layer's copies of the model's tensors, as DeepSeek ships them:
# suffix of the MTP layer's name -> the model's name whose values it holds.
MTP_COPIES = {"embed_tokens.weight": "model.embed_tokens.weight",
              "shared_head.head.weight": "lm_head.weight"}


def load(vllm_config, model: torch.nn.Module, weights: Iterable[tuple[str, torch.Tensor]],
         model_config=None) -> None:
    """What vLLM's loader does at start-up: ``load_weights``, then every
    layer's post-load processing. ``model_config``: the model's (a
    draft's; None: ``vllm_config``'s)."""
    from vllm.config import set_current_vllm_config
    from vllm.model_executor.model_loader.utils import process_weights_after_loading

    with set_current_vllm_config(vllm_config), torch.no_grad():
        model.load_weights(iter(list(weights)))
        process_weights_after_loading(model, model_config or vllm_config.model_config,
                                      torch.device("cpu"))


def load_weights(vllm_config, model: torch.nn.Module,
                 weights: Iterable[tuple[str, torch.Tensor]]) -> None:
    """vLLM's ``load_weights`` alone (an update of weights already processed
    as loaded)."""
    from vllm.config import set_current_vllm_config

    with set_current_vllm_config(vllm_config), torch.no_grad():
        model.load_weights(iter(list(weights)))


def vllm_reload(vllm_config, model: torch.nn.Module,
                weights: Iterable[tuple[str, torch.Tensor]], model_config=None) -> None:
    """vLLM's own reload path, as its NCCL engine runs it. ``model_config``:
    the model's (a draft's; None: ``vllm_config``'s)."""
    from vllm.config import set_current_vllm_config
    from vllm.model_executor.model_loader.reload import (
        finalize_layerwise_reload,
        initialize_layerwise_reload,
    )

    with set_current_vllm_config(vllm_config), torch.no_grad():
        initialize_layerwise_reload(model)
        model.load_weights(iter(list(weights)))
        finalize_layerwise_reload(model, model_config or vllm_config.model_config)

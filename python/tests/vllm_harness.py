"""A trainer and inference workers in separate processes, driven through
vLLM's own weight-transfer factories and lifecycle, for the ``loadplan``
backend's tests and benchmark.

Each worker builds a tiny vLLM model (``vllm_tiny``) twice from the
same checkpoint: the one the backend updates, and a reference that vLLM's
own reload path updates with the same weights. Trainer rank 0 drives the
workers through a ``VLLMWeightSyncClient`` over pipes. Every update's
weights are random, a function of (name, seed, round), so each process
makes the same ones without shipping them.
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import multiprocessing as mp
import os
import sys
import threading
import time
import traceback
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any

import torch

from loadplan.transfer import free_port

HERE = Path(__file__).resolve().parent


def round_tensor(name: str, shape, dtype: torch.dtype, seed: int, round_: int) -> torch.Tensor:
    """The weight of ``name`` at update ``round_``: random normal values,
    the same in every process."""
    digest = hashlib.sha256(f"{seed}/{round_}/{name}".encode()).digest()
    gen = torch.Generator().manual_seed(int.from_bytes(digest[:8], "little"))
    if not dtype.is_floating_point:  # packed values or exponents (mxfp4, int4): any bytes
        shape = tuple(shape) or (1,)
        raw = (*shape[:-1], shape[-1] * dtype.itemsize)
        out = torch.randint(0, 256, raw, dtype=torch.uint8, generator=gen).view(dtype)
        return out.reshape(tuple(shape))
    return (torch.randn(tuple(shape), generator=gen) * 0.05).to(dtype)


def round_value(spec: "Spec", meta, round_: int) -> torch.Tensor:
    """The tensor of checkpoint entry ``meta`` at update ``round_``: an MTP
    layer's copies of the embedding and the LM head hold the values of the
    model's, as DeepSeek's checkpoints do; every other name its own."""
    import vllm_tiny as tiny

    name = meta.name
    if name.endswith(".weight_shape"):  # a W4A16 weight's shape: the checkpoint's, always
        return _checkpoint_tensor(spec.model_dir, name)
    if spec.draft:
        layer, _, suffix = name.removeprefix("model.layers.").partition(".")
        if layer.isdigit() and suffix in tiny.MTP_COPIES:
            name = tiny.MTP_COPIES[suffix]
    return round_tensor(name, meta.shape, meta.dtype, spec.seed, round_)


@functools.lru_cache(maxsize=None)
def _checkpoint_tensor(model_dir: str, name: str) -> torch.Tensor:
    """Tensor ``name`` of the saved model in ``model_dir``."""
    from safetensors import safe_open

    for path in sorted(Path(model_dir).glob("*.safetensors")):
        with safe_open(str(path), "pt") as f:
            if name in f.keys():
                return f.get_tensor(name)
    raise KeyError(name)


@dataclass
class Spec:
    """One scenario."""

    family: str
    model_dir: str
    tp: int = 1  # inference workers (tensor parallel)
    trainers: int = 1
    engine: str = "m_to_n"
    sharded: bool = False  # trainer ranks hold row/column shards (M-to-N)
    expert_parallel: bool = False
    moe_prepack: str = "identity"
    atomic: bool = True
    seed: int = 0
    plan_dir: str = ""
    timeout: float = 120.0
    master_port: int = 0
    vllm_port: int = 0
    fp32_names: tuple[str, ...] = ("e_score_correction_bias",)
    # The engine serves the fp8 block-quantized checkpoint (tiny.save's
    # fp8); the trainer holds bf16 and quantizes tiny.FP8_WEIGHTS.
    fp8: bool = False
    # vLLM steered onto GPU weight-processing paths (vllm_steer.profiles),
    # in every process of the scenario.
    steer: str = ""
    # vLLM's own reload of this model raises (MoE sizes vLLM pads on the
    # CPU at the first load only): the checks compare with a fresh load.
    vllm_reload_fails: bool = False
    # The inference engine: "vllm" (worker_main) or "sglang"
    # (sglang_harness.worker_main, driven through loadplan.sglang's client).
    serving: str = "vllm"
    # The trainer runs loadplan.trainer.Trainer in a process where vLLM
    # cannot be imported, its source a plain object with loadplan.trainer's
    # Params (SGLang only).
    trainer_without_vllm: bool = False
    # SGLang's MoE runner backend (its --moe-runner-backend): a GPU
    # backend's name steers its fused MoE layers onto that backend's weight
    # processing on the CPU.
    sglang_moe_runner: str = "auto"
    # The session's transport (TrainerInfo.transport): None picks by the
    # device; "ipc": the workers read the trainer's shared memory.
    transport: str | None = None
    # The engine runs DeepSeek-V3's MTP layer as a speculative draft model
    # (the saved model has it: vllm_tiny.save(mtp=True)), and the trainer
    # updates it with the model (TrainerInfo.draft).
    draft: bool = False
    # The trainer's source keeps its tensors and writes each round's values
    # into them, as an optimizer updates parameters in place (otherwise it
    # makes new tensors every round).
    source_in_place: bool = False


_INTEGER = {"U8": torch.uint8, "I32": torch.int32, "I64": torch.int64}


def metadata(spec: Spec, variant: str | None = None):
    """vLLM ParamMetas of the checkpoint as the trainer holds it: each
    tensor's checkpoint shape and dtype (fp32 where real checkpoints ship
    it; bf16 for an fp8 engine's quantized weights, whose scales the trainer
    makes), owned and placed as the trainer holds it."""
    from safetensors import safe_open

    if spec.trainer_without_vllm:
        from loadplan.trainer import Param as ParamMeta
        from loadplan.trainer import Shard
    else:
        from vllm.distributed.weight_transfer.base import ParamMeta, Shard

    out = []
    for path in sorted(Path(spec.model_dir).glob("*.safetensors")):
        with safe_open(str(path), "pt") as f:
            for name in f.keys():
                if spec.fp8 and name.endswith("_scale_inv"):
                    continue
                t = f.get_slice(name)
                shape = tuple(t.get_shape())
                dtype = torch.float32 if name.endswith(spec.fp32_names) else torch.bfloat16
                # mxfp4 blocks and scales, int4 words and weight shapes: sent
                # as they are.
                dtype = _INTEGER.get(t.get_dtype(), dtype)
                if spec.sharded and spec.trainers > 1 and len(shape) >= 2:
                    dim = 1 if ("o_proj" in name or "down_proj" in name) else 0
                    out.append(ParamMeta(name, dtype, shape, owners=tuple(range(spec.trainers)),
                                         placements=(Shard(dim),)))
                else:
                    out.append(ParamMeta(name, dtype, shape))
    if variant == "unknown_name":  # a tensor the model has no place for
        out.append(ParamMeta("model.layers.0.mlp.bogus_proj.weight", torch.bfloat16, (4, 4)))
    elif variant == "reversed":  # the same names, declared and sent the other way round
        out.reverse()
    elif variant == "float32":  # float32 for every bf16 weight
        out = [replace(m, dtype=torch.float32) for m in out]
    elif variant == "wrong_shape":  # the first 2-D weight a row short
        k = next(i for i, m in enumerate(out) if len(m.shape) == 2)
        out[k] = replace(out[k], shape=(out[k].shape[0] - 1, *out[k].shape[1:]))
    return out


def fp8_patterns(spec: Spec) -> tuple[str, ...]:
    """What the trainer of an fp8 engine quantizes: ``tiny.FP8_WEIGHTS``'s
    patterns that match a name of its checkpoint (the backend refuses one
    that matches none)."""
    if not spec.fp8:
        return ()
    import vllm_tiny as tiny
    from fnmatch import fnmatchcase

    names = [m.name for m in metadata(spec)]
    return tuple(p for p in tiny.FP8_WEIGHTS if any(fnmatchcase(n, p) for n in names))


def weights(spec: Spec, round_: int, variant: str | None = None) -> list[tuple[str, torch.Tensor]]:
    """The checkpoint of round ``round_`` as the engine serves it (an fp8
    engine's weights quantized as ``quantize_blocks`` does), as a trainer
    declaring ``variant`` sends it."""
    import vllm_tiny as tiny

    out = []
    for m in metadata(spec, variant):
        t = round_value(spec, m, round_)
        out += tiny.fp8_quantized(m.name, t) if spec.fp8 else [(m.name, t)]
    return out


def make_source(spec: Spec, rank: int, variant: str | None = None):
    """A vLLM ``WeightSource`` of each round's weights, as trainer ``rank``
    holds them (a plain object for a trainer without vLLM); ``variant``: the
    checkpoint it declares (see ``metadata``)."""
    from functools import cached_property

    from loadplan.trainer import owner_boxes

    if spec.trainer_without_vllm:
        base = object
    else:
        from vllm.distributed.weight_transfer.base import WeightSource as base

    class Source(base):
        round = 0
        _made: dict = {}

        @cached_property
        def metadata(self):
            return metadata(spec, variant)

        def prepare(self, round_: int) -> None:
            """Makes the round's tensors now, as a trainer holds its weights
            before it sends them (so that timing a send times the send)."""
            self.round = round_
            if spec.source_in_place and self._made:
                # As an optimizer step: the same tensors, new values.
                for m in self.metadata:
                    if m.name in self._made:
                        self._made[m.name].copy_(
                            round_value(spec, m, round_))
                return
            self._made = {m.name: round_value(spec, m, round_)
                          for m in self.metadata if m.owners is None or rank in m.owners}

        def _tensor(self, m):
            made = self._made.get(m.name)
            if made is not None:
                return made
            return round_value(spec, m, self.round)

        def iter_full(self):
            for m in self.metadata:
                if m.owners is None or rank in m.owners:
                    yield m.name, self._tensor(m)

        def iter_local(self):
            for m in self.metadata:
                boxes = owner_boxes(m, spec.trainers)
                if rank not in boxes:
                    continue
                t, box = self._tensor(m), boxes[rank]
                if box is not None:
                    t = t[tuple(slice(a, b) for a, b in box)].contiguous()
                yield m.name, t

    return Source()


# ---------------------------------------------------------------------------
# Processes


def _setup_process(spec: Spec) -> None:
    if os.environ.get("LOADPLAN_HARNESS_STACKS"):  # every N s, each thread's stack
        import faulthandler

        faulthandler.dump_traceback_later(float(os.environ["LOADPLAN_HARNESS_STACKS"]),
                                          repeat=True)
    torch.set_num_threads(1)
    os.environ.setdefault("VLLM_LOGGING_LEVEL", "WARNING")
    import vllm_tiny as tiny

    import vllm_steer

    tiny.use_cpu_platform()
    tiny.cpu_kernels(spec.moe_prepack,
                     fp8=spec.fp8 and not vllm_steer.steers_fp8_linears(spec.steer))
    vllm_steer.apply(spec.steer)
    from vllm.plugins import load_general_plugins

    load_general_plugins()  # registers the loadplan backend (entry point)


def _tensors(model: torch.nn.Module) -> dict[str, torch.Tensor]:
    """Every parameter and buffer, and the tensors an attention layer's
    backend object keeps (``MODULE#impl.NAME``): kernels read state there
    that no module holds (FlashInfer's fp32 copy of the sinks)."""
    out = {}
    for name, t in list(model.named_parameters()) + list(model.named_buffers()):
        out.setdefault(name, t)
    for name, module in model.named_modules():
        impl = getattr(module, "impl", None)
        if impl is None or isinstance(impl, torch.nn.Module):
            continue
        for attr, value in vars(impl).items():
            if isinstance(value, torch.Tensor):
                out.setdefault(f"{name}#impl.{attr}", value)
    return out


def _compare(model: torch.nn.Module, reference: torch.nn.Module) -> list[str]:
    """Every parameter and buffer that differs, byte for byte."""
    ours, theirs = _tensors(model), _tensors(reference)
    problems = [f"{n}: only in one model" for n in sorted(set(ours) ^ set(theirs))]
    for name in sorted(set(ours) & set(theirs)):
        a, b = ours[name].detach(), theirs[name].detach()
        if a.shape != b.shape or a.dtype != b.dtype:
            problems.append(f"{name}: {a.dtype} {tuple(a.shape)} vs {b.dtype} {tuple(b.shape)}")
        elif a.is_meta or b.is_meta:  # a layer left in its checkpoint format
            problems.append(f"{name}: on the meta device in the "
                            f"{'first' if a.is_meta else 'second'} model")
        elif a.numel() and not torch.equal(a.contiguous().view(-1).view(torch.uint8),
                                           b.contiguous().view(-1).view(torch.uint8)):
            problems.append(f"{name}: bytes differ")
    return problems


def _digest(model: torch.nn.Module) -> str:
    h = hashlib.sha256()
    for name, t in sorted(_tensors(model).items()):
        h.update(name.encode())
        h.update(t.detach().contiguous().view(-1).view(torch.uint8).numpy().tobytes())
    return h.hexdigest()


def _fresh(spec: Spec, tp_rank: int, init: str, ws) -> tuple:
    """A model built and loaded from ``ws`` as vLLM's loader does at
    start-up, and its draft (None without one): the other reference an
    update is compared with."""
    config, model = _built(spec, tp_rank, init, ws)
    return model, _drafted(spec, config, model, ws)


def _built(spec: Spec, tp_rank: int, init: str, ws) -> tuple:
    import vllm_tiny as tiny

    config, model = tiny.build(spec.model_dir, tp_size=spec.tp, rank=tp_rank, init_method=init,
                               expert_parallel=spec.expert_parallel)
    tiny.load(config, model, ws)
    return config, model


def _drafted(spec: Spec, config, model: torch.nn.Module, ws):
    """``model``'s MTP draft loaded from ``ws`` as vLLM's proposer loads it
    (its embedding and LM head then the model's): ``(draft_model_config,
    draft)``, or None for a spec without one."""
    if not spec.draft:
        return None
    import vllm_tiny as tiny

    draft_config, draft = tiny.build_draft(config)
    tiny.load(config, draft, ws, draft_config)
    tiny.share_with_target(config, draft, model)
    return draft_config, draft


def _compare_all(model, draft, reference, ref_draft) -> list[str]:
    """``_compare`` of the models, and of their drafts (as ``draft.NAME``)."""
    out = _compare(model, reference)
    if draft is not None:
        out += [f"draft.{p}" for p in _compare(draft, ref_draft)]
    return out


def worker_main(conn, trainer_conns, spec: Spec, tp_rank: int) -> None:
    try:
        _setup_process(spec)
        from vllm.config import WeightTransferConfig
        from vllm.distributed.weight_transfer.factory import WeightTransferEngineFactory
        from vllm.logger import configure_logging

        import vllm_tiny as tiny

        init = f"tcp://127.0.0.1:{spec.vllm_port}"
        initial = tiny.checkpoint(spec.model_dir)
        config, model = tiny.build(spec.model_dir, tp_size=spec.tp, rank=tp_rank,
                                   init_method=init, expert_parallel=spec.expert_parallel)
        # What vLLM's worker process does first (multiproc_executor).
        if (logging_config := getattr(config, "logging_config", None)) is not None:
            configure_logging(logging_config)
        tiny.load(config, model, initial)
        drafted = _drafted(spec, config, model, initial)
        ref_config, reference = _built(spec, tp_rank, init, initial)
        ref_drafted = _drafted(spec, ref_config, reference, initial)
        draft = ref_draft = None
        if drafted is not None:
            (draft_config, draft), (ref_draft_config, ref_draft) = drafted, ref_drafted
        engine = WeightTransferEngineFactory.create_engine(
            WeightTransferConfig(backend="loadplan"), config, torch.device("cpu"), model)
        conn.send(("ok", type(engine).__name__))
    except BaseException:
        conn.send(("error", traceback.format_exc()))
        return
    # Why vLLM's reload of the reference model raised: the model is then
    # half reloaded, and not reloaded again.
    reload_failed = None

    def handle(method: str, arg):
        nonlocal reload_failed
        if method == "init_weight_transfer_engine":
            return engine.init_transfer_engine(engine.parse_init_info(arg))
        # The update's lifecycle as vLLM's worker drives the engine
        # (gpu_worker: start_weight_update / start_draft_weight_update,
        # update_weights, finish_weight_update).
        if method in ("start_weight_update", "start_draft_weight_update"):
            if method == "start_draft_weight_update":
                if not engine.supports_draft_weight_update:
                    raise RuntimeError(f"{type(engine).__name__} does not support draft model "
                                       "weight updates.")
                if draft is None:
                    raise RuntimeError("Draft model weight update requested, but no draft "
                                       "model is configured.")
                engine.set_weight_update_target(draft, draft_config)
            try:
                return engine.start_weight_update()
            except BaseException:
                engine.reset_weight_update_target()
                raise
        if method == "update_weights":
            try:
                return engine.update_weights(arg)
            except BaseException:
                engine.reset_weight_update_target()
                raise
        if method == "finish_weight_update":
            engine.finish_weight_update()
            return engine.reset_weight_update_target()
        if method == "check":  # round `arg[0]` as declared by variant `arg[1]`
            ws = weights(spec, *arg)
            if reload_failed is None:
                try:
                    tiny.vllm_reload(ref_config, reference, ws)
                    if ref_draft is not None:
                        tiny.vllm_reload(ref_config, ref_draft, ws, ref_draft_config)
                except Exception as e:  # noqa: BLE001 - reported, and checked
                    reload_failed = f"{type(e).__name__}: {e}"
            failed = reload_failed
            fresh, fresh_drafted = _fresh(spec, tp_rank, init, ws)
            fresh_draft = None if fresh_drafted is None else fresh_drafted[1]
            return {"vllm": [] if failed else _compare_all(model, draft, reference, ref_draft),
                    "fresh": _compare_all(model, draft, fresh, fresh_draft),
                    "references": [] if failed else _compare_all(reference, ref_draft, fresh,
                                                                  fresh_draft),
                    "vllm_failed": failed}
        if method == "time_reference":  # vLLM's own reload, timed
            ws = weights(spec, arg)
            t0 = time.perf_counter()
            tiny.vllm_reload(ref_config, reference, ws)
            return time.perf_counter() - t0
        if method == "taken":  # the steered paths, as the model took them
            import vllm_steer

            return vllm_steer.taken(spec.steer, model)
        if method == "compare":
            return _compare(model, reference)
        if method == "digest":
            return _digest(model)
        if method == "plan":  # the model's plan; arg "draft": its draft's
            if arg == "draft":
                engine.set_weight_update_target(draft, draft_config)
                try:
                    return handle("plan", None)
                finally:
                    engine.reset_weight_update_target()
            from loadplan.vllm.plans import processing_signature

            plan = engine.plan
            return None if plan is None else {
                "report": plan.report, "processed": list(engine.processed),
                "refreshed": list(engine.refreshed),
                "recomputed": list(engine.recomputed),
                "rearranged": list(engine.rearranged), "traced": bool(plan.ir), "rank": tp_rank,
                "signature": processing_signature(engine.model),
                "modules": {n: sorted({w.target.rpartition(".")[0] for w in e.writes})
                            for n, e in plan.entries.items() if e.writes},
                "kinds": {n: e.kind for n, e in plan.entries.items()},
                "nbytes": {n: e.nbytes for n, e in plan.entries.items()},
                "reasons": {n: e.reason for n, e in plan.entries.items() if e.reason},
                "stats": None if engine.last_stats is None else asdict(engine.last_stats)}
        raise ValueError(f"unknown method {method!r}")

    serve(conn, trainer_conns, handle, engine.shutdown)


def serve(conn, trainer_conns, handle, shutdown) -> None:
    """A worker's loop: answers the test's calls (``conn``) and trainer rank
    0's (``trainer_conns``, one per trainer start) with ``handle(method,
    arg)``'s result or error, until ``shutdown`` (which runs ``shutdown()``)
    or the test's line closes. ``last_error`` returns the last failed call's
    error."""
    from multiprocessing.connection import wait

    conns = [conn, *trainer_conns]
    last_error = None  # of the engine's calls, for the tests to read
    while True:
        ready = wait(conns)
        source = ready[0]
        try:
            method, arg = source.recv()
        except EOFError:
            conns.remove(source)
            if source is conn or not conns:
                return
            continue
        try:
            if method == "last_error":
                result, last_error = last_error, None
            elif method == "shutdown":
                shutdown()
                source.send(("ok", None))
                return
            else:
                result = handle(method, arg)
            source.send(("ok", result))
        except BaseException as e:
            last_error = f"{type(e).__name__}: {e}"
            with contextlib.suppress(OSError):  # a trainer that died reads nothing
                source.send(("error", last_error))


class PipeClient:
    """vLLM's ``VLLMWeightSyncClient`` over pipes to the worker processes:
    each call fans out to every worker and raises the first error.
    ``asked`` is set once an update's call went to every worker."""

    UPDATES = ("update_weights", "update_weights_from_distributed")
    asked = threading.Event()

    def __init__(self, conns):
        self.conns = conns

    def _all(self, method: str, arg: Any = None) -> list:
        for c in self.conns:
            c.send((method, arg))
        if method in self.UPDATES:
            PipeClient.asked.set()
        results = [c.recv() for c in self.conns]
        errors = [r for status, r in results if status == "error"]
        if errors:
            raise RuntimeError(f"worker failed {method}: {errors[0]}")
        return [r for _, r in results]

    def call(self, method: str, arg: Any = None) -> None:
        """One call on every worker (SGLang's control calls, by route)."""
        self._all(method, arg)

    def init_weight_transfer_engine(self, init_info):
        self._all("init_weight_transfer_engine", init_info)

    def start_weight_update(self):
        self._all("start_weight_update")

    def start_draft_weight_update(self):
        self._all("start_draft_weight_update")

    def update_weights(self, update_info):
        self._all("update_weights", update_info)

    def finish_weight_update(self, weight_version=None):
        self._all("finish_weight_update")


def _without_vllm() -> None:
    """From here on, this process cannot import vLLM, as where it is not
    installed."""
    import importlib.abc

    class NoVllm(importlib.abc.MetaPathFinder):
        def find_spec(self, name, path, target=None):
            if name == "vllm" or name.startswith("vllm."):
                raise ModuleNotFoundError(f"No module named {name!r} (this trainer runs "
                                          "without vLLM)", name=name)
            return None

    loaded = [m for m in sys.modules if m == "vllm" or m.startswith("vllm.")]
    assert not loaded, f"vLLM was imported before the trainer started: {loaded[:3]}"
    sys.meta_path.insert(0, NoVllm())


def _plain_trainer(spec: Spec, rank: int, worker_conns):
    """loadplan's own Trainer, with SGLang's client, in a process without vLLM."""
    _without_vllm()
    torch.set_num_threads(1)
    from loadplan.sglang.client import SGLangClient
    from loadplan.trainer import Trainer, TrainerInfo

    info = TrainerInfo(
        rank=rank, master_address="127.0.0.1", master_port=spec.master_port,
        world_size=spec.trainers + spec.tp, num_trainer_ranks=spec.trainers,
        engine=spec.engine, atomic=spec.atomic, timeout=spec.timeout, transport=spec.transport,
        plan_dir=spec.plan_dir, quantize_fp8=fp8_patterns(spec), draft=spec.draft)
    return Trainer.start(info, client=SGLangClient(PipeClient(worker_conns).call),
                         source=make_source(spec, rank))


def trainer_main(conn, spec: Spec, rank: int, worker_conns) -> None:
    try:
        make = _plain_trainer if spec.trainer_without_vllm else _vllm_trainer
        engine = make(spec, rank, worker_conns)
        conn.send(("ok", type(engine).__name__))
    except BaseException:
        conn.send(("error", traceback.format_exc()))
        return
    _trainer_loop(conn, spec, rank, engine)


def _vllm_trainer(spec: Spec, rank: int, worker_conns):
    """vLLM's trainer factory makes loadplan's trainer engine."""
    _setup_process(spec)
    from vllm.distributed.weight_transfer.factory import WeightTransferTrainerFactory

    from loadplan.vllm.info import LoadplanTrainerInitInfo

    source = make_source(spec, rank)
    client = PipeClient(worker_conns)
    if spec.serving == "sglang":
        from loadplan.sglang.client import SGLangClient

        client = SGLangClient(client.call)
    info = LoadplanTrainerInitInfo(
        rank=rank, master_address="127.0.0.1", master_port=spec.master_port,
        world_size=spec.trainers + spec.tp, num_trainer_ranks=spec.trainers,
        engine=spec.engine, atomic=spec.atomic, timeout=spec.timeout, transport=spec.transport,
        plan_dir=spec.plan_dir, quantize_fp8=fp8_patterns(spec), draft=spec.draft)
    return WeightTransferTrainerFactory.trainer_init(info, client=client, source=source)


def _trainer_loop(conn, spec: Spec, rank: int, engine) -> None:
    """Answers the test's calls: ``send`` (one update), ``shutdown``."""
    while True:
        method, arg = conn.recv()
        try:
            if method == "send":
                want = (arg.get("variant"), arg.get("wrong_dtype"), arg.get("wrong_shape"),
                        arg.get("missing"), arg.get("raising"))
                if want != getattr(engine.source, "want", (None,) * 5):
                    engine.source = make_source(spec, rank, want[0])
                    engine.source.want = want
                    for suffix, how in zip(want[1:], ("dtype", "shape", "missing", "raise")):
                        if suffix:
                            _break_source(engine.source, suffix, how)
                source = engine.source
                source.prepare(arg["round"])
                if arg.get("die_after_s") is not None:
                    _die_later(arg["die_after_s"])
                if arg.get("die_in_set_up"):
                    _die_in_set_up(asks=rank == 0)
                client = engine.client
                if arg.get("engine_down"):
                    engine.client = _unreachable_client()
                t0 = time.perf_counter()
                try:
                    engine.send_weights(release_mappings=arg.get("release_mappings", False))
                finally:
                    engine.client = client
                result = time.perf_counter() - t0
            elif method == "shutdown":
                engine.shutdown()
                conn.send(("ok", None))
                return
            else:
                raise ValueError(f"unknown method {method!r}")
            conn.send(("ok", result))
        except BaseException as e:
            conn.send(("error", f"{type(e).__name__}: {e}"))


def _die_in_set_up(asks: bool) -> None:
    """The process exits as it hands in its part of the endpoints' set-up;
    rank 0 (``asks``) once its client asked every worker to update (the
    call runs on a thread of its own: without the wait, a worker may never
    be asked)."""
    from loadplan.transfer.rendezvous import Rendezvous

    store_set = Rendezvous.store_set
    PipeClient.asked.clear()

    def die(self, key: str, value: bytes) -> None:
        if "/desc/" in key:  # its offer to the schedule's agreement
            if asks:
                PipeClient.asked.wait(30)
            os._exit(9)
        store_set(self, key, value)

    Rendezvous.store_set = die


def _unreachable_client():
    """vLLM's HTTP client of an engine whose server is gone: a port of this
    host that nothing listens on."""
    from vllm.distributed.weight_transfer.clients import HTTPVLLMWeightSyncClient

    return HTTPVLLMWeightSyncClient(f"http://127.0.0.1:{free_port()}", timeout=5)


def _die_later(seconds: float) -> None:
    threading.Timer(seconds, lambda: os._exit(9)).start()


def _break_source(source, name_suffix: str, how: str) -> None:
    """The source yields one tensor in another dtype (``how="dtype"``) or
    shape (``"shape"``: a row short) than declared, not at all
    (``"missing"``), or raises there (``"raise"``)."""
    original = source.iter_local, source.iter_full

    def broken(t):
        return t.to(torch.float16) if how == "dtype" else t[:-1]

    def wrap(it):
        for name, t in it():
            if not name.endswith(name_suffix):
                yield name, t
            elif how == "raise":
                raise OSError(f"the source lost {name}")
            elif how != "missing":
                yield name, broken(t)

    source.iter_local = lambda: wrap(original[0])
    source.iter_full = lambda: wrap(original[1])


def check_mappings_after(cluster: "Cluster", round_: int, released: int) -> None:
    """The workers' colocated stats after update ``round_`` of a trainer
    that keeps its tensors (``source_in_place``), whose update ``released``
    (from the third on) was sent with ``release_mappings``: no mapping after
    it, some after every other; from update ``released`` on, a header per
    update, and the table too only in the one after the release."""
    stats = [p["stats"] for p in cluster.workers("plan")]
    if round_ == released:
        assert all(s["mappings"] == 0 for s in stats), stats
    else:
        assert all(s["mappings"] > 0 for s in stats), stats
    if round_ >= released:
        want = 2 if round_ == released + 1 else 1
        assert all(s["messages_received"] == want * cluster.spec.trainers
                   for s in stats), (round_, stats)


def dies_in_set_up_is_noticed(cluster: "Cluster", round_: int, suffix: str) -> None:
    """Trainer rank 1 (not the store's) dies as it sets up new endpoints:
    the other ranks notice within 2 s and name it, the model is unchanged,
    and restarted trainers update it again. Uses rounds ``round_`` to
    ``round_ + 2``; a refused update (a tensor of ``suffix`` in another
    dtype) first makes the trainer set up new endpoints, without new
    plans."""
    before = cluster.workers("digest")
    results = cluster.update(round_, wrong_dtype={0: suffix})
    assert results[0][0] == "error", results
    t0 = time.perf_counter()
    results = cluster.update(round_ + 1, die_in_set_up={1})
    took = time.perf_counter() - t0
    status, message = results[0]
    assert status == "error" and "rank 1 is gone: its process ended" in message, results
    # From the session's liveness watch, not at the timeout.
    assert took < 2.0, took
    for error in cluster.last_errors():
        assert error is not None and "rank 1 is gone: its process ended" in error, error
    assert cluster.workers("digest") == before
    cluster.restart_trainers()
    results = cluster.update(round_ + 2)
    assert all(s == "ok" for s, _ in results), results
    assert inexact(cluster, round_ + 2) == []


TRAINER_STARTS = 8


class Cluster:
    """The processes of one scenario. ``update(round)`` runs one update
    through the trainer; ``workers(method, arg)`` asks every worker."""

    def __init__(self, spec: Spec):
        spec.master_port = spec.master_port or free_port()
        spec.vllm_port = spec.vllm_port or free_port()
        self.spec = spec
        self._ctx = ctx = mp.get_context("spawn")
        os.environ["PYTHONPATH"] = os.pathsep.join([str(HERE)] + sys.path)
        self.worker_conns, self.procs = [], []
        # Trainer rank 0's lines to the workers: one set per trainer start
        # (the first, and restarts after a trainer died).
        self._lines: list[list] = [[] for _ in range(TRAINER_STARTS)]
        for r in range(spec.tp):
            parent, child = ctx.Pipe()
            theirs = []
            for k in range(TRAINER_STARTS):
                ours, end = ctx.Pipe()
                self._lines[k].append(ours)
                theirs.append(end)
            if spec.serving == "sglang":
                from sglang_harness import worker_main as target
            else:
                target = worker_main
            p = ctx.Process(target=target, args=(child, theirs, spec, r), daemon=True)
            p.start()
            self.worker_conns.append(parent)
            self.procs.append(p)
        for c in self.worker_conns:
            self._expect(c, "worker start")
        self.trainer_conns = []
        self._start_trainers()

    def _start_trainers(self) -> None:
        spec, ctx = self.spec, self._ctx
        for r in range(spec.trainers):
            parent, child = ctx.Pipe()
            peers = self._lines[0] if r == 0 else []
            p = ctx.Process(target=trainer_main, args=(child, spec, r, peers), daemon=True)
            p.start()
            self.trainer_conns.append(parent)
            self.procs.append(p)
        self._lines.pop(0)
        # The class each trainer rank runs.
        self.trainers = [self._expect(c, "trainer start") for c in self.trainer_conns]

    @staticmethod
    def _expect(conn, what: str, timeout: float = 600.0):
        if not conn.poll(timeout):
            raise TimeoutError(f"{what}: no answer in {timeout} s")
        status, result = conn.recv()
        if status != "ok":
            raise RuntimeError(f"{what} failed: {result}")
        return result

    def update(self, round_: int, **faults) -> list:
        """Every trainer rank sends round ``round_``; returns each rank's
        result ("ok", seconds) or ("error", message). ``faults``:
        ``die_after_s={rank: s}`` kills a trainer rank that long into the
        update, ``die_in_set_up={rank, ...}`` as it sets up its endpoint;
        ``wrong_dtype={rank: suffix}`` / ``wrong_shape={rank:
        suffix}`` makes a rank's source yield a tensor in another dtype or
        shape than declared; ``missing={rank: suffix}``: not at all;
        ``raising={rank: suffix}``: the source raises at it;
        ``variant``: the checkpoint the trainer declares (``metadata``);
        ``engine_down=True``: rank 0's client reaches no engine (vLLM's
        HTTP client, at a port nothing listens on), for this update;
        ``release_mappings=True``: the workers close their mappings of the
        trainer's memory after it (transport ``ipc``)."""
        die = faults.get("die_after_s", {})
        die_in_set_up = faults.get("die_in_set_up", set())
        dtype, shape = faults.get("wrong_dtype", {}), faults.get("wrong_shape", {})
        missing, raising = faults.get("missing", {}), faults.get("raising", {})
        for r, c in enumerate(self.trainer_conns):
            c.send(("send", {"round": round_, "die_after_s": die.get(r),
                             "wrong_dtype": dtype.get(r), "wrong_shape": shape.get(r),
                             "missing": missing.get(r), "raising": raising.get(r),
                             "die_in_set_up": r in die_in_set_up,
                             "engine_down": r == 0 and faults.get("engine_down", False),
                             "release_mappings": faults.get("release_mappings", False),
                             "variant": faults.get("variant")}))
        out = []
        for r, c in enumerate(self.trainer_conns):
            if r in die or r in die_in_set_up:
                out.append(("died", None))
                continue
            if not c.poll(self.spec.timeout * 2):
                out.append(("error", "no answer"))
                continue
            out.append(c.recv())
        return out

    def workers(self, method: str, arg: Any = None) -> list:
        # Only between updates: the relay threads use the same pipes then.
        for c in self.worker_conns:
            c.send((method, arg))
        return [self._expect_result(c, method) for c in self.worker_conns]

    def last_errors(self, timeout: float = 60.0) -> list:
        """Each worker's error of its last failed call, waiting for it (a
        worker may not have failed yet when asked first)."""
        deadline = time.monotonic() + timeout
        errors = [None] * len(self.worker_conns)
        while True:
            for i, c in enumerate(self.worker_conns):
                if errors[i] is None:
                    c.send(("last_error", None))
                    errors[i] = self._expect(c, "last_error")
            if None not in errors or time.monotonic() > deadline:
                return errors
            time.sleep(0.5)

    def _expect_result(self, conn, what):
        return self._expect(conn, what)

    def restart_trainers(self) -> None:
        """New trainer processes (after one died), with a fresh trainer_init."""
        for c in self.trainer_conns:
            with contextlib.suppress(Exception):
                c.send(("shutdown", None))
        self.trainer_conns = []
        self.spec.master_port = free_port()
        self._start_trainers()

    def close(self) -> None:
        for c in self.trainer_conns + self.worker_conns:
            with contextlib.suppress(Exception):
                c.send(("shutdown", None))
        for p in self.procs:
            p.join(timeout=10)
            if p.is_alive():
                p.kill()


# Where vLLM's own reload path is known to differ from a fresh load, by
# family: the tensors whose names hold one of these (gpt-oss's experts,
# which its loader writes around the weight loaders vLLM's reload watches).
VLLM_STALE = {"gpt_oss": ("mlp.experts.routed_experts.",)}
# ... and in every family: compressed-tensors' ``weight_shape`` of MoE
# experts, which gate_proj and up_proj both load into w13's; vLLM's
# layerwise reload counts both, processes the layer before the last of them
# arrive and drops those (its "Excessive loading", a limitation it
# documents), so a reload whose shapes' values changed keeps old ones.
VLLM_STALE_ALL = ("_weight_shape",)


def inexact(cluster: Cluster, round_: int, variant: str | None = None) -> list[str]:
    """What is wrong, one line per worker, after update ``round_`` (as
    declared by ``variant``): every worker's model must equal, byte for
    byte, one freshly loaded from the round's weights, and vLLM's reload of
    them wherever that equals the fresh load; a line says which path is
    wrong, and vLLM's reload may differ only where ``VLLM_STALE`` says (or
    raise, only where the spec says it does).
    Empty: exact."""
    stale = VLLM_STALE.get(cluster.spec.family, ()) + VLLM_STALE_ALL
    problems = []
    for rank, c in enumerate(cluster.workers("check", (round_, variant))):
        where = f"worker {rank}, update {round_}"
        if bool(c["vllm_failed"]) != cluster.spec.vllm_reload_fails:
            problems.append(f"{where}: vLLM's own reload " + (
                f"raises ({c['vllm_failed']})" if c["vllm_failed"] else "no longer raises"))
        if c["fresh"]:
            ours = {d.split(": ")[0] for d in c["fresh"]}
            also = [d for d in c["references"] if d.split(": ")[0] in ours]
            blame = ("vLLM's own reload equals the fresh load there: loadplan's path is wrong"
                     if not also else f"vLLM's own reload differs from the fresh load there "
                     f"too, at {also[:4]}")
            problems.append(f"{where}: loadplan differs from a freshly loaded model at "
                            f"{c['fresh'][:6]}; {blame}")
            continue
        # loadplan equals the fresh load, so where vLLM's reload differs,
        # vLLM's reload is wrong: only where it is known to be.
        wrong = [d for d in c["references"] if not any(s in d for s in stale)]
        if wrong:
            problems.append(f"{where}: vLLM's own reload is wrong (a fresh load differs) at "
                            f"{wrong}")
    return problems


@functools.cache
def saved_model(family: str, root: str, **sizes) -> str:
    import vllm_tiny as tiny

    path = Path(root) / "-".join([family, *(f"{k}{v}" for k, v in sorted(sizes.items()))])
    if not (path / "config.json").exists():
        tiny.save(family, path, **sizes)
    return str(path)


# ---------------------------------------------------------------------------
# Planning an engine's classes directly (no backend): test_vllm_patterns.py,
# test_sglang_patterns.py


def _cases(families) -> list[tuple[str, str, dict]]:
    """``(label, family, save keywords)`` of each entry of ``families``: a
    family's name, or a ``(label, family, save keywords)`` triple."""
    return [(f, f, {}) if isinstance(f, str) else (f[0], f[1], dict(f[2])) for f in families]


def plan_main(conn, families, root: str, tp: int, rank: int, port: int, seed: int,
              engine: str = "vllm", build: dict | None = None) -> None:
    """One TP rank: for each family, plans the engine's model (``vllm_tiny``
    or ``sglang_tiny`` builds it, with ``build`` as keywords) with
    ``plan_loads`` and applies one random update both through
    ``load_planned`` and through the engine's ``load_weights`` on a second
    copy. Sends back, per family, each name's kind, reason and number of
    writes, and the tensors that differ."""
    try:
        torch.set_num_threads(1)
        os.environ.setdefault("VLLM_LOGGING_LEVEL", "WARNING")
        import importlib

        import vllm_tiny

        tiny = importlib.import_module(f"{engine}_tiny")
        if engine == "vllm":
            tiny.use_cpu_platform()  # before vLLM picks a platform
            tiny.cpu_kernels()

        import loadplan
        from loadplan.verification import copy_bytes, first_difference, model_tensors
        from loadplan.verification import random_weights as random_bytes
        init = f"tcp://127.0.0.1:{port}"
        out = {}
        for label, family, sizes in _cases(families):
            model_dir = saved_model(family, root, **sizes)
            initial = vllm_tiny.checkpoint(model_dir)
            metas = [loadplan.ParamMeta(n, tuple(t.shape), t.dtype) for n, t in initial]
            made = []
            for _ in range(2):
                config, model = tiny.build(model_dir, tp_size=tp, rank=rank, init_method=init,
                                           **(build or {}))
                tiny.load(config, model, initial)
                made.append((config, model))
            (config, planned), (ref_config, reference) = made
            copy_bytes(reference, planned)
            params = {n: t.dtype for n, t in planned.named_parameters()}
            plan = loadplan.plan_loads(planned, metas)
            update = random_bytes(metas, seed)
            tiny.load_weights(ref_config, reference, [(n, t.clone()) for n, t in update])
            loadplan.load_planned(planned, plan, [(n, t.clone()) for n, t in update])
            ours = model_tensors(planned)
            differ = [str(m) for name, t in model_tensors(reference).items()
                      if (m := first_difference(name, t, ours[name], 0)) is not None]
            out[label] = {
                "entries": {n: (e.kind, e.reason, len(e.writes or ())) for n, e in
                            plan.entries.items()},
                "checkpoint_dtypes": sorted({str(m.dtype) for m in metas}),
                "param_dtypes": sorted({str(d) for d in params.values()}),
                "differ": differ}
        conn.send(("ok", out))
    except BaseException:
        conn.send(("error", traceback.format_exc()))


def plan_ranks(families, root: str, layouts: list[tuple[int, int]], seed: int = 0,
               timeout: float = 300.0, engine: str = "vllm", build: dict | None = None) -> dict:
    """Runs ``plan_main`` for every ``(tp, rank)`` of ``layouts``, each in
    its own process (an engine's distributed state is once per process), all
    at once; ranks of one TP size meet over Gloo. Returns
    ``{(tp, rank): {label: result}}``."""
    for _, family, sizes in _cases(families):  # saved once, before the processes read it
        saved_model(family, root, **sizes)
    ctx = mp.get_context("spawn")
    os.environ["PYTHONPATH"] = os.pathsep.join([str(HERE)] + sys.path)
    ports = {tp: free_port() for tp, _ in layouts}
    running = []
    for tp, rank in layouts:
        parent, child = ctx.Pipe()
        p = ctx.Process(target=plan_main, daemon=True,
                        args=(child, families, root, tp, rank, ports[tp], seed, engine, build))
        p.start()
        running.append(((tp, rank), parent, p))
    results = {}
    try:
        deadline = time.monotonic() + timeout
        for key, conn, _ in running:
            if not conn.poll(max(0.0, deadline - time.monotonic())):
                raise TimeoutError(f"TP={key[0]} rank {key[1]}: no answer in {timeout} s")
            status, result = conn.recv()
            if status != "ok":
                raise RuntimeError(f"TP={key[0]} rank {key[1]} failed: {result}")
            results[key] = result
    finally:
        for _, _, p in running:
            p.join(timeout=10)
            if p.is_alive():
                p.kill()
    return results

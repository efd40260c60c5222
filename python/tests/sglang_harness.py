"""SGLang workers for vllm_harness's clusters (``Spec(serving="sglang")``).

Each worker process is one SGLang TP rank as its scheduler process sets it
up (sglang_tiny), with SGLang's plugins loaded from their entry points
(loadplan's among them) and SGLang's own weight-update objects: a
``WeightUpdater`` over the model and the ``SchedulerWeightUpdaterManager``
that runs SGLang's control calls (sessions, distributed updates). The
trainer's ``loadplan.sglang.client.SGLangClient`` calls them by route over
pipes, as SGLang's tokenizer manager hands its HTTP requests to every TP
rank; what this process adds around them is only the scheduler's
bookkeeping (weight versions, cache flushes: nothing to flush here).

The reference model is updated by SGLang's own distributed-update path on
a second ``WeightUpdater``: ``begin_weight_update``,
``load_weights_from_distributed`` of the round's full tensors,
``end_weight_update``; and a third model is loaded fresh from them.
"""

from __future__ import annotations

import dataclasses
import time
import traceback
from types import SimpleNamespace

import torch

import vllm_harness as h


def _updater(model, tp_rank: int):
    from sglang.srt.model_executor.model_runner_components.weight_updater import WeightUpdater

    runner = SimpleNamespace(model=model)
    updater = WeightUpdater(
        tp_rank=tp_rank, device="cpu", gpu_id=0, model_config=None, custom_weight_loaders=[],
        get_model=lambda: model, update_model_fields=lambda **_: None,
        recapture_cuda_graph=lambda: None, get_model_runner=lambda: runner)
    runner.weight_updater = updater
    return runner


class _TpWorker:
    """The TP worker's side of SGLang's weight-update calls: its own
    methods, over one model runner."""

    def __init__(self, runner):
        from sglang.srt.managers.tp_worker import TpModelWorker

        self._model_runner = self.model_runner = runner
        self._methods = TpModelWorker

    def init_weights_update_group(self, recv_req):
        return self._methods.init_weights_update_group(self, recv_req)

    def destroy_weights_update_group(self, recv_req):
        return self._methods.destroy_weights_update_group(self, recv_req)

    def weight_update_runners(self):
        return self._methods.weight_update_runners(self)


REQUESTS = {
    "init_weights_update_group": "InitWeightsUpdateGroupReqInput",
    "destroy_weights_update_group": "DestroyWeightsUpdateGroupReqInput",
    "begin_weight_update": "BeginWeightUpdateReqInput",
    "update_weights_from_distributed": "UpdateWeightsFromDistributedReqInput",
    "end_weight_update": "EndWeightUpdateReqInput",
}


def worker_main(conn, trainer_conns, spec: h.Spec, tp_rank: int) -> None:
    try:
        torch.set_num_threads(1)
        import sglang_tiny as tiny
        import vllm_tiny
        from sglang.srt.managers import io_struct
        from sglang.srt.managers.scheduler_components.weight_updater import (
            SchedulerWeightUpdaterManager,
        )
        from sglang.srt.plugins import load_plugins

        init = f"tcp://127.0.0.1:{spec.vllm_port}"
        ep = spec.tp if spec.expert_parallel else 1
        tiny.init_distributed(spec.tp, tp_rank, init, ep, spec.sglang_moe_runner)
        load_plugins()  # SGLang's scheduler process does this first: loadplan's hooks
        initial = vllm_tiny.checkpoint(spec.model_dir)

        def built():
            _, model = tiny.build(spec.model_dir, tp_size=spec.tp, rank=tp_rank,
                                  init_method=init, ep_size=ep,
                                  moe_runner_backend=spec.sglang_moe_runner)
            return model

        model, reference = built(), built()
        tiny.load(None, model, initial)
        tiny.load(None, reference, initial)
        manager = SchedulerWeightUpdaterManager(
            tp_worker=_TpWorker(_updater(model, tp_rank)), draft_worker=None,
            memory_saver_adapter=None, flush_cache=lambda empty_cache=False: True,
            is_fully_idle=lambda **_: True,
            scheduler=SimpleNamespace(record_weight_version_change=lambda new_version=None: None))
        ref_updater = _updater(reference, tp_rank).weight_updater
        conn.send(("ok", type(model).__name__))
    except BaseException:
        conn.send(("error", traceback.format_exc()))
        return

    def own_update(ws) -> None:
        """SGLang's own update of the reference: a session around
        load_weights."""
        ref_updater.begin_weight_update()
        ok, message = ref_updater.load_weights_from_distributed(ws)
        ref_updater.end_weight_update(run_post_load=False)
        if not ok:
            raise RuntimeError(f"SGLang's own update failed: {message}")

    def handle(method: str, arg):
        if method in REQUESTS:
            out = getattr(manager, method)(getattr(io_struct, REQUESTS[method])(**(arg or {})))
            if not out.success:
                raise RuntimeError(out.message)
            return out.message
        if method == "check":  # round `arg[0]` as declared by variant `arg[1]`
            ws = h.weights(spec, *arg)
            own_update(ws)
            fresh = built()
            tiny.load(None, fresh, ws)
            return {"vllm": h._compare(model, reference), "fresh": h._compare(model, fresh),
                    "references": h._compare(reference, fresh), "vllm_failed": None}
        if method == "plan":  # the loadplan worker's plan, and how it was made
            from loadplan.sglang import workers_of

            worker = next(iter(workers_of(manager.tp_worker.model_runner.weight_updater)
                               .values()), None)
            if worker is None or worker.plan is None:
                return None
            return {"how": worker.how, "report": worker.plan.report,
                    "kinds": {n: e.kind for n, e in worker.plan.entries.items()},
                    "stats": None if worker.last_stats is None
                    else dataclasses.asdict(worker.last_stats)}
        if method == "time_reference":  # SGLang's own update of round `arg`, timed
            ws = h.weights(spec, arg)
            t0 = time.perf_counter()
            own_update(ws)
            return time.perf_counter() - t0
        if method == "moe_layouts":  # each fused MoE layer's runner and w13's shape
            return sorted({(bool(getattr(m.quant_method, "use_flashinfer_trtllm_moe", False)),
                            tuple(m.w13_weight.shape))
                           for m in model.modules() if hasattr(m, "w13_weight")})
        if method == "compare":
            return h._compare(model, reference)
        if method == "digest":
            return h._digest(model)
        raise ValueError(f"unknown method {method!r}")

    def shutdown():
        from loadplan.sglang import workers_of

        for worker in workers_of(manager.tp_worker.model_runner.weight_updater).values():
            worker.close()

    h.serve(conn, trainer_conns, handle, shutdown)

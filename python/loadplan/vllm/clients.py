"""vLLM's weight-sync clients with the draft model's start: vLLM's server
has a ``/start_draft_weight_update`` route and its ``LLM`` and
``AsyncLLM`` a ``start_draft_weight_update`` method, but its HTTP and Ray
clients do not call them. A trainer with ``draft=True`` takes these
instead (or ``LLM`` itself, which has every method)."""

from __future__ import annotations

from vllm.distributed.weight_transfer.clients import (
    HTTPVLLMWeightSyncClient,
    RayVLLMWeightSyncClient,
)


class HTTPWeightSyncClient(HTTPVLLMWeightSyncClient):
    """vLLM's HTTP client, and ``start_draft_weight_update`` (its server's
    route of that name)."""

    def start_draft_weight_update(self) -> None:
        self._post("start_draft_weight_update")


class RayWeightSyncClient(RayVLLMWeightSyncClient):
    """vLLM's Ray client, and ``start_draft_weight_update`` on every
    handle."""

    def start_draft_weight_update(self) -> None:
        import ray

        ray.get([h.start_draft_weight_update.remote() for h in self.handles])

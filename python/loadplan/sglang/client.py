"""The trainer's side of loadplan in SGLang: a client that drives an SGLang
server's weight updates through its own control calls, for loadplan's
trainer engine (``loadplan.vllm.trainer.LoadplanTrainerWeightTransferEngine``,
which holds the rendezvous store and sends each update).

The engine calls the client as it calls vLLM's weight-sync client; this one
turns each call into SGLang's:

===============================  =========================================
the trainer engine's call        SGLang's call
===============================  =========================================
``init_weight_transfer_engine``  ``init_weights_update_group``
                                 (``backend="loadplan"``)
``start_weight_update``          ``begin_weight_update``
``update_weights``               ``update_weights_from_distributed``
                                 (``load_format="loadplan"``)
``finish_weight_update``         ``end_weight_update``
===============================  =========================================

``SGLangClient.http(url)`` makes them over SGLang's HTTP API; any other
``call(route, payload)`` (SGLang's Python ``Engine``, a test's pipes) works
the same.
"""

from __future__ import annotations

import datetime
import json
from collections.abc import Callable

from ..serving import RELEASE_SUFFIX, WIRE_KEYS, endpoint_name
from .worker import BACKEND, init_key


class SGLangClient:
    """Drives SGLang's weight updates for loadplan's trainer engine.

    ``call(route, payload)`` makes one of SGLang's control calls (the HTTP
    route's name, its JSON body) on every TP rank and raises with SGLang's
    message where one fails."""

    def __init__(self, call: Callable[[str, dict], None]):
        self._call = call
        self.session: str | None = None

    @classmethod
    def http(cls, url: str, *, timeout: float | None = None) -> SGLangClient:
        """Over SGLang's HTTP API at ``url`` (``http://host:port``)."""
        import requests

        base = url.rstrip("/")

        def call(route: str, payload: dict) -> None:
            response = requests.post(f"{base}/{route}", json=payload, timeout=timeout)
            try:
                body = response.json()
            except ValueError:
                body = {"success": False, "message": response.text}
            if response.status_code != 200 or not body.get("success", False):
                raise RuntimeError(f"load plan: SGLang's {route} failed "
                                   f"({response.status_code}): {body.get('message')}")

        return cls(call)

    def init_weight_transfer_engine(self, init_info: dict) -> None:
        """The trainer's wire parameters go into its store, where each TP
        rank reads them as it joins (SGLang's call carries only the
        rendezvous)."""
        import torch.distributed as dist

        session = init_info["session"]
        store = dist.TCPStore(init_info["master_address"], int(init_info["master_port"]),
                              is_master=False,
                              timeout=datetime.timedelta(seconds=init_info["timeout"]))
        store.set(init_key(session), json.dumps({k: init_info[k] for k in WIRE_KEYS}))
        self.session = session
        self._call("init_weights_update_group", {
            "master_address": init_info["master_address"],
            "master_port": int(init_info["master_port"]),
            "rank_offset": int(init_info["rank_offset"]),
            "world_size": int(init_info["world_size"]),
            "group_name": session, "backend": BACKEND})

    def start_weight_update(self) -> None:
        self._call("begin_weight_update", {})

    def update_weights(self, update_info: dict) -> None:
        if self.session is None:
            raise RuntimeError("load plan: init_weight_transfer_engine first")
        # SGLang's request has no field for release_mappings: the name says it.
        name = endpoint_name(self.session, int(update_info["epoch"]))
        if update_info.get("release_mappings"):
            name += RELEASE_SUFFIX
        self._call("update_weights_from_distributed", {
            "names": list(update_info.get("names", [])),
            "dtypes": list(update_info.get("dtype_names", [])),
            "shapes": [list(s) for s in update_info.get("shapes", [])],
            "group_name": name,
            "load_format": BACKEND})

    def finish_weight_update(self, weight_version: str | None = None) -> None:
        self._call("end_weight_update", {})

    def close(self) -> None:
        """Closes the session on every TP rank."""
        if self.session is not None:
            self._call("destroy_weights_update_group", {"group_name": self.session})
            self.session = None

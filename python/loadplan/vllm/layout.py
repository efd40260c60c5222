"""Which box of each checkpoint tensor a trainer rank holds, from vLLM's
``ParamMeta`` (owners, mesh shape and placements: what
``WeightSource.iter_local`` yields on each owner): ``loadplan.trainer``'s,
which reads vLLM's ``ParamMeta`` as it reads its own ``Param``."""

from __future__ import annotations

from ..serving import dtype_named  # noqa: F401 - the worker's name for it
from ..trainer import holdings_of, owner_boxes  # noqa: F401 - the backend's


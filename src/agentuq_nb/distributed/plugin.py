"""What every Dask worker process does once, before its first task.

The worker runs tasks of this package, so importing it already applies the offline
environment (``agentuq_nb/__init__``); :class:`WorkerSetup` applies it again explicitly,
because a worker may import litellm (via another plugin or a task) before any of ours.

Models are loaded once per worker process by the LLM layer's own per-process cache
(``llm.get_local_model``); nothing here preloads them, so a worker that only scores with a
remote model never loads the embedded one.

Threads: the embedded model serves one request at a time per process, so a worker gives it
as many llama.cpp threads as it has Dask threads (``$AGENTUQ_NB_THREADS``, unless set), as
Dask's nanny does for OpenMP/BLAS. Otherwise every worker would use all the machine's cores
and ``dask worker --nworkers 2 --nthreads 1`` on 2 cores would run 4 spinning threads.
"""
from __future__ import annotations

import os
import zlib

from distributed.diagnostics.plugin import WorkerPlugin

from agentuq_nb.common.offline import ensure_offline_env
from agentuq_nb.distributed import worker as worker_settings


class WorkerSetup(WorkerPlugin):
    name = "agentuq-nb-worker-setup"

    def __init__(self, api_bases: list[str] | None = None, assigned: dict[str, str] | None = None):
        self.api_bases = list(api_bases or [])
        self.assigned = dict(assigned or {})

    def setup(self, worker) -> None:
        ensure_offline_env()
        os.environ.setdefault("AGENTUQ_NB_THREADS", str(worker.state.nthreads))  # read when the model loads
        api_base = None
        if self.api_bases:
            fallback = self.api_bases[zlib.crc32(str(worker.name).encode()) % len(self.api_bases)]
            api_base = self.assigned.get(worker.address, fallback)
        worker_settings.set_api_base(api_base)

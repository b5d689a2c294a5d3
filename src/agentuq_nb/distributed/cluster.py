"""``--scheduler``: connect to a Dask scheduler, or start a LocalCluster of worker processes.

``ADDRESS`` (``tcp://host:8786``, or anything ``distributed.Client`` accepts) connects to a
running scheduler; ``local:N`` starts ``N`` worker processes with one thread each on this
machine (one simulation or scoring job per process: the embedded model is single-threaded
per request and llama.cpp's threads do not share well). An existing ``Client`` is used as is.
"""
from __future__ import annotations

import sys
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import Any

LOCAL_PREFIX = "local:"


def parse_scheduler(spec: str) -> tuple[str | None, int | None]:
    """``"local:N"`` → ``(None, N)``; an address → ``(address, None)``."""
    spec = str(spec).strip()
    if spec.startswith(LOCAL_PREFIX):
        count = spec[len(LOCAL_PREFIX):]
        if not count.isdigit() or int(count) < 1:
            raise ValueError(f"scheduler {spec!r}: 'local:N' needs a number of worker processes N >= 1")
        return None, int(count)
    if not spec:
        raise ValueError("scheduler is empty; give a scheduler address (tcp://host:8786) or local:N")
    return spec, None


@contextmanager
def connect(scheduler: Any, api_bases: Sequence[str] | None = None, dashboard_address: str | None = ":8787",
            timeout: str = "30s", log=lambda msg: print(msg, file=sys.stderr)) -> Iterator[Any]:
    """Yield a ``distributed.Client`` with :class:`~agentuq_nb.distributed.plugin.WorkerSetup` registered.

    A cluster or client made here is closed on exit; a ``Client`` passed in is left open.
    """
    from distributed import Client, LocalCluster

    from agentuq_nb.distributed.plugin import WorkerSetup
    from agentuq_nb.distributed.worker import assign_api_bases

    cluster = client = None
    if isinstance(scheduler, Client):
        client, owned = scheduler, False
    else:
        address, n_workers = parse_scheduler(scheduler)
        owned = True
        if n_workers is not None:
            cluster = LocalCluster(n_workers=n_workers, threads_per_worker=1, processes=True,
                                   dashboard_address=dashboard_address)
            client = Client(cluster)
        else:
            try:
                client = Client(address, timeout=timeout)
            except (OSError, TimeoutError) as err:
                raise ConnectionError(
                    f"scheduler {address}: no Dask scheduler answered ({err}). Start one with "
                    f"'dask scheduler' and workers with 'dask worker {address}', or use local:N."
                ) from err
    try:
        workers = list(client.scheduler_info().get("workers", {}))
        assigned = assign_api_bases(workers, list(api_bases or []))
        client.register_plugin(WorkerSetup(list(api_bases or []), assigned))
        if owned:
            log(f"dask: {len(workers)} worker(s); dashboard {client.dashboard_link}")
        yield client
    finally:
        if owned:
            client.close()
            if cluster is not None:
                cluster.close()

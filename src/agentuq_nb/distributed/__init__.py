"""Running jobs: in this process or scaled out on Dask (``dask.distributed``), no scheduler of our own.

* :mod:`~agentuq_nb.distributed.executor` - :class:`JobRunner`, the one job executor: serial, threads
  or Dask, a progress bar, interrupts with "run the same command again"; simulate, rescore and
  score-observations run their jobs through it.
* :mod:`~agentuq_nb.distributed.cluster` - ``--scheduler ADDRESS`` / ``local:N`` → a connected
  ``Client`` with the per-worker setup registered.
* :mod:`~agentuq_nb.distributed.plugin` - what every worker process does once: offline
  environment, and its share of an ``api_base`` list (:mod:`~agentuq_nb.distributed.worker`).
* :mod:`~agentuq_nb.distributed.fanout` - run one function per key on the cluster, handle each
  result on the client as it arrives, dedupe by key, retry on errors and on dead workers.

The work itself (a simulation, a scored trajectory, a notebook run) is defined next to its
in-process version, in ``sim.runner``, ``uq.observation`` and ``pipeline.reproduce``; this
package imports none of the layers (only ``common``), so any layer may use it. ``dask`` is
imported only when a scheduler is given (it is the ``[dask]`` extra).
"""
from agentuq_nb.distributed.cluster import LOCAL_PREFIX, connect, parse_scheduler
from agentuq_nb.distributed.executor import Interrupted, JobRunner
from agentuq_nb.distributed.fanout import FanOutFailed, fan_out
from agentuq_nb.distributed.worker import with_worker_api_base, worker_api_base

__all__ = ["LOCAL_PREFIX", "connect", "parse_scheduler", "fan_out", "FanOutFailed", "worker_api_base",
           "with_worker_api_base", "JobRunner", "Interrupted"]

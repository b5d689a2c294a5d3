"""The one job executor: run ``fn(job)`` for every ``(key, job)``, hand each result to ``on_result``.

Three ways to run, one contract:

* **serial** (default) - in order, in this process;
* **threads** (``threads > 1``) - a thread pool with a bounded number of jobs in flight (remote APIs);
* **Dask** (``scheduler``) - one task per job on a cluster through :func:`~agentuq_nb.distributed.fan_out`
  (``worker_fn`` runs there instead of ``fn``, e.g. to take the worker's ``api_base``).

``on_result`` always runs in the calling thread, once per key, so it is the single writer (a
checkpoint per result). A tqdm bar counts results (``done`` already-finished jobs count from the
start). On Ctrl-C (or :class:`Interrupted` from a job) running jobs are told to stop through
:attr:`JobRunner.stop_event`, queued ones are cancelled, and one line says how many results are
kept and to run the same command again; then ``KeyboardInterrupt`` propagates.
"""
from __future__ import annotations

import sys
import threading
from collections.abc import Callable, Hashable, Iterable
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait
from dataclasses import dataclass, field
from typing import Any

from agentuq_nb.distributed.fanout import FanOutFailed, submit_up_to


class Interrupted(Exception):
    """A job noticed :attr:`JobRunner.stop_event` and stopped early (its result is not kept)."""


@dataclass
class JobRunner:
    """How to run a batch of jobs; :meth:`run` runs them. See the module docstring."""

    label: str = "job"  # names the jobs (Dask task keys start with it)
    desc: str | None = None  # the progress bar's text (default: label)
    unit: str = "job"  # the progress bar's unit
    noun: str = "jobs"  # what the interrupt message counts
    threads: int = 1
    scheduler: Any = None
    api_bases: list[str] | None = None
    retries: int = 2
    progress: bool = True
    kept_as: str = "done"  # "checkpointed in <folder>": how finished results are kept
    stop_event: threading.Event = field(default_factory=threading.Event)

    def run(self, fn: Callable[[Any], Any], jobs: Iterable[tuple[Hashable, Any]],
            on_result: Callable[[Hashable, Any], None], total: int | None = None, done: int | Callable[[], int] = 0,
            worker_fn: Callable[[Any], Any] | None = None, describe: Callable[[Hashable], str] | None = None) -> int:
        """Run every job; returns the number of results handled. ``total`` includes the ``done`` ones
        (a number, or a function that counts them when the jobs are generated lazily)."""
        if self.threads < 1:
            raise ValueError(f"threads must be >= 1, got {self.threads}")
        bar = None
        if self.progress:
            from tqdm import tqdm  # a text bar: terminals and papermill-executed notebooks alike

            bar = tqdm(total=total, initial=done if isinstance(done, int) else 0, desc=self.desc or self.label,
                       unit=self.unit, file=sys.stderr)
        handled = 0

        def show() -> None:
            """The bar at the results handled plus those done before (counted as the lazy jobs skip them)."""
            if bar is not None and callable(done):
                bar.n = done() + handled
                bar.refresh()
            elif bar is not None:
                bar.update(handled + done - bar.n)

        def handle(key: Hashable, result: Any) -> None:
            nonlocal handled
            on_result(key, result)
            handled += 1
            show()

        try:
            if self.scheduler is not None:
                self._on_cluster(worker_fn or fn, jobs, handle)
            elif self.threads == 1:
                for key, job in jobs:
                    if bar is not None and describe is not None:
                        bar.set_postfix_str(describe(key))
                    handle(key, fn(job))
            else:
                self._on_threads(fn, jobs, handle)
        except (KeyboardInterrupt, Interrupted):
            self.stop_event.set()
            kept = (done if isinstance(done, int) else done()) + handled
            remaining = f"the remaining {total - kept}" if total is not None else "the rest"
            print(f"\nInterrupted: {kept}{f' of {total}' if total is not None else ''} {self.noun} are "
                  f"{self.kept_as}. Run the same command again to finish {remaining}.", file=sys.stderr)
            raise KeyboardInterrupt from None
        finally:
            if bar is not None:
                show()  # a resumed run whose jobs were all done before: the bar says so (N/N, not 0/N)
                bar.close()
        return handled

    def _on_threads(self, fn, jobs, handle) -> None:
        pending = iter(jobs)
        window = 2 * self.threads  # bounded: a long stream of jobs never sits in memory at once
        with ThreadPoolExecutor(max_workers=self.threads, thread_name_prefix=self.label) as pool:
            in_flight: dict[Future, Hashable] = {}

            def submit(key: Hashable, job: Any) -> None:
                in_flight[pool.submit(fn, job)] = key

            def submit_more() -> None:
                submit_up_to(window, in_flight, pending, submit)

            try:
                submit_more()
                while in_flight:
                    finished, _ = wait(in_flight, timeout=0.5, return_when=FIRST_COMPLETED)
                    for future in finished:
                        key = in_flight.pop(future)
                        handle(key, future.result())  # a job's error is raised here
                    submit_more()
            except BaseException:
                self.stop_event.set()
                for future in in_flight:
                    future.cancel()
                raise

    def _on_cluster(self, fn, jobs, handle) -> None:
        from agentuq_nb.distributed.cluster import connect
        from agentuq_nb.distributed.fanout import fan_out

        with connect(self.scheduler, self.api_bases) as client:
            fan_out(client, fn, jobs, handle, retries=self.retries, label=self.label)


__all__ = ["JobRunner", "Interrupted", "FanOutFailed"]

"""One function per key on the cluster; each result handled on the client as it arrives.

Why results come back to the client instead of workers writing files: workers need no
shared filesystem, and the client is the single writer, so a result is written once per
key however often the scheduler had to rerun its job.

Failures: a job that raises is re-run up to ``retries`` times (dask's ``retries=``); a job
whose worker dies is rescheduled on another worker by the scheduler itself (up to
``distributed.scheduler.allowed-failures`` deaths, then ``KilledWorker``). A job that still
fails does not stop the others: every result that arrives is handled, then
:class:`FanOutFailed` lists the failures.
"""
from __future__ import annotations

import uuid
from collections.abc import Callable, Hashable, Iterable, Iterator, Sized
from typing import Any

from agentuq_nb.common.naming import slug


class FanOutFailed(RuntimeError):
    """Some jobs failed on the cluster; ``failures`` pairs each key with its exception."""

    def __init__(self, failures: list[tuple[Hashable, BaseException]]):
        self.failures = failures
        key, exc = failures[0]
        super().__init__(f"{len(failures)} job(s) failed on the cluster; first {key!r}: {type(exc).__name__}: {exc}")


def key_text(key: Hashable) -> str:
    """A job key as a Dask key part (hyphens separate the parts, so none inside)."""
    text = "_".join(map(str, key)) if isinstance(key, tuple) else str(key)
    return slug(text).replace("-", "_")


def submit_up_to(window: int, in_flight: Sized, pending: Iterator[tuple[Hashable, Any]],
                 submit: Callable[[Hashable, Any], None]) -> None:
    """Take ``(key, job)`` items from ``pending`` and ``submit`` them until ``window`` are ``in_flight`` or none is left
    (bounded: a long stream of jobs never sits in memory at once). ``submit`` adds what it submits to ``in_flight``;
    one that adds nothing (a job it skips) lets the next be taken."""
    while len(in_flight) < window:
        item = next(pending, None)
        if item is None:
            return
        submit(*item)


def fan_out(client: Any, fn: Callable[[Any], Any], jobs: Iterable[tuple[Hashable, Any]],
            on_result: Callable[[Hashable, Any], None], *, retries: int = 2, window: int | None = None,
            label: str = "job") -> int:
    """Run ``fn(job)`` for every ``(key, job)``; call ``on_result(key, value)`` once per key.

    ``jobs`` is consumed lazily with at most ``window`` jobs in flight (default: 4 per
    worker), so a long stream of trajectories never sits in memory at once. A repeated key
    is submitted once. ``label`` prefixes the task names shown in the Dask dashboard.
    Returns the number of results handled.
    """
    from distributed import as_completed

    run_id = uuid.uuid4().hex[:8]  # dask keys must not collide with another run on the same cluster
    window = window or 4 * max(1, len(client.scheduler_info().get("workers", {})))
    pending_jobs = iter(jobs)
    submitted: set[Hashable] = set()
    in_flight: dict[str, tuple[Hashable, Any]] = {}
    failures: list[tuple[Hashable, BaseException]] = []
    results = as_completed()
    handled = 0

    def submit(key: Hashable, job: Any) -> None:
        if key in submitted:
            return
        submitted.add(key)
        future = client.submit(fn, job, key=f"{label}-{key_text(key)}-{run_id}", retries=retries, pure=False)
        in_flight[future.key] = (key, future)
        results.add(future)

    def submit_more() -> None:
        submit_up_to(window, in_flight, pending_jobs, submit)

    try:
        submit_more()
        for future in results:
            key, _ = in_flight.pop(future.key)
            if future.status == "finished":
                on_result(key, future.result())
                handled += 1
            elif future.status == "cancelled":
                failures.append((key, RuntimeError("cancelled by the scheduler")))
            else:
                failures.append((key, future.exception()))
            future.release()
            submit_more()
    except BaseException:
        client.cancel([f for _, f in in_flight.values()])
        raise
    if failures:
        raise FanOutFailed(failures)
    return handled

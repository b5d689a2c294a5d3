"""The one job executor: serial and threads give the same results to one writer, once per key; an
interrupt keeps what is done and says how to resume."""
from __future__ import annotations

import threading
import time

import pytest

from agentuq_nb.distributed import Interrupted, JobRunner


def _square(job):
    time.sleep(0.01 * (job % 3))  # out of order on threads
    return job * job


@pytest.mark.parametrize("threads", [1, 3])
def test_every_result_reaches_the_one_writer(threads):
    got, writers = {}, set()

    def save(key, value):
        writers.add(threading.get_ident())
        assert key not in got
        got[key] = value

    runner = JobRunner(label="square", threads=threads, progress=False)
    handled = runner.run(_square, ((f"k{i}", i) for i in range(20)), save, total=20)
    assert handled == 20 and got == {f"k{i}": i * i for i in range(20)}
    assert writers == {threading.get_ident()}  # results are handled in the calling thread


@pytest.mark.parametrize("threads", [1, 2])
def test_an_interrupt_keeps_results_and_says_how_to_resume(threads, capsys):
    saved = []

    def job(i):
        if i == 4:
            raise KeyboardInterrupt
        if runner.stop_event.is_set():
            raise Interrupted()
        return i

    runner = JobRunner(label="sim", noun="simulations", threads=threads, progress=False, kept_as="checkpointed in X")
    with pytest.raises(KeyboardInterrupt):
        runner.run(job, ((i, i) for i in range(10)), lambda k, v: saved.append(k), total=12, done=2)
    err = capsys.readouterr().err
    assert f"Interrupted: {2 + len(saved)} of 12 simulations are checkpointed in X." in err
    assert f"finish the remaining {10 - len(saved)}" in err and runner.stop_event.is_set()
    assert 4 not in saved


def test_a_job_error_propagates_after_earlier_results_are_kept():
    saved = []

    def job(i):
        if i == 3:
            raise RuntimeError("boom")
        return i

    with pytest.raises(RuntimeError, match="boom"):
        JobRunner(progress=False).run(job, ((i, i) for i in range(6)), lambda k, v: saved.append(k))
    assert saved == [0, 1, 2]


@pytest.mark.parametrize("threads", [1, 2])
def test_the_bar_counts_jobs_done_before_as_the_lazy_jobs_skip_them(threads, capsys):
    skipped = []

    def jobs(n_done: int, total: int):
        for i in range(total):
            if i < n_done:  # checkpointed by an earlier run: counted, not yielded
                skipped.append(i)
                continue
            yield i, i

    runner = JobRunner(label="score", unit="traj", threads=threads, progress=True)
    runner.run(_square, jobs(5, 8), lambda k, v: None, total=8, done=lambda: len(skipped))
    assert "8/8" in capsys.readouterr().err
    skipped.clear()
    runner.run(_square, jobs(8, 8), lambda k, v: None, total=8, done=lambda: len(skipped))  # all done before
    err = capsys.readouterr().err
    assert "8/8" in err and "0/8" not in err.splitlines()[-1]
    runner.run(_square, ((i, i) for i in range(3)), lambda k, v: None, total=5, done=2)
    assert "5/5" in capsys.readouterr().err

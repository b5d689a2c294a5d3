"""Scale-out on Dask with real components: a LocalCluster of 2 worker processes on loopback, the
embedded model, real papermill. The cluster run must equal the in-process run (up to wall-clock
fields), survive a killed worker, and dask.dataframe aggregation must equal the pandas one."""
from __future__ import annotations

import json
import os
import shutil
import signal
import threading
import time
from pathlib import Path

import nbformat
import pandas as pd
import pytest
import yaml

from agentuq_nb.distributed import connect, parse_scheduler
from agentuq_nb.io.errors import InputError
from agentuq_nb.io.store.token_table import PARTITIONED_DIR, read_token_table, token_partitions
from agentuq_nb.pipeline.reproduce import load_studies, load_study
from agentuq_nb.sim import run_simulations
from agentuq_nb.sim.runner import CHECKPOINT_DIR, checkpoint_name, trial_seeds, without_wall_clock
from agentuq_nb.steps.aggregate import aggregate
from agentuq_nb.steps.evaluate import evaluate
from agentuq_nb.steps.rescore import rescore
from agentuq_nb.steps.score_observations import score_observations

from conftest import run_cli

# two short bookshop conversations: one for each worker (each simulation is ~8 s of CPU, most of it prompt decoding)
SIM_TASKS = ["2", "10"]
SIM_PARAMS = dict(task_ids=SIM_TASKS, max_steps=4, max_errors=3, agent_max_tokens=32, user_max_tokens=24,
                  progress=False)


def read_run(run_dir: Path) -> tuple[dict, dict[str, list[dict]]]:
    """Results and every sidecar's rows, without the wall-clock fields (timestamps, durations,
    the token rows' message_timestamp): two runs with the same parameters must agree on the rest."""
    results = json.loads((run_dir / "results.json").read_text())
    sidecars = {p.name: [json.loads(line) for line in p.read_text(encoding="utf-8").splitlines() if line.strip()]
                for p in sorted((run_dir / "sidecars").glob("*.jsonl"))}
    return without_wall_clock(results), without_wall_clock(sidecars)


def assert_same_run(a: Path, b: Path) -> None:
    results_a, rows_a = read_run(a)
    results_b, rows_b = read_run(b)
    assert results_a == results_b
    assert list(rows_a) == list(rows_b) and rows_a == rows_b


@pytest.fixture(scope="module")
def client():
    """A LocalCluster of 2 worker processes for the file's tests. Without work stealing: the simulation of a killed
    worker waits for the busy survivor (its model loaded) rather than move to the fresh process that replaces the
    victim, which would load the model and decode the long prompts again."""
    import dask
    from distributed import Client, LocalCluster

    with dask.config.set({"distributed.scheduler.work-stealing": False}):
        cluster = LocalCluster(n_workers=2, threads_per_worker=1, processes=True, dashboard_address=":0",
                               host="127.0.0.1")
    with cluster, Client(cluster) as c:
        yield c


@pytest.fixture(scope="module")
def reference_run(tmp_path_factory) -> Path:
    """The same simulations, in-process and sequential."""
    out = tmp_path_factory.mktemp("in_process")
    run_simulations("bookshop", out, **SIM_PARAMS)
    return out


# ----------------------------------------------------------------------------- fast checks

def test_scheduler_spec_is_parsed_or_refused():
    assert parse_scheduler("local:2") == (None, 2)
    assert parse_scheduler("tcp://10.0.0.5:8786") == ("tcp://10.0.0.5:8786", None)
    for bad in ("local:0", "local:two", "  "):
        with pytest.raises(ValueError, match="local:N|empty"):
            parse_scheduler(bad)


def test_unreachable_scheduler_is_a_clear_error():
    with pytest.raises(ConnectionError, match=r"127\.0\.0\.1:9.*dask scheduler"):
        with connect("tcp://127.0.0.1:9", timeout="1s"):
            pass


def test_grid_expands_to_one_study_per_point(tmp_path):
    path = tmp_path / "sweep.yaml"
    path.write_text(yaml.safe_dump({
        "name": "sweep", "parameters": {"domain": "bookshop", "seed": 1},
        "grid": {"seed": [300, 301], "task_ids": [["1", "2"], ["3"]]},
        "notebooks": ["01_simulate", {"name": "04_evaluate", "parameters": {"n_boot": 10}}],
    }, sort_keys=False))
    studies = load_studies(path)
    assert [s.name for s in studies] == ["sweep__seed=300__task_ids=1,2", "sweep__seed=300__task_ids=3",
                                         "sweep__seed=301__task_ids=1,2", "sweep__seed=301__task_ids=3"]
    assert studies[3].notebooks == [("01_simulate", {"domain": "bookshop", "seed": 301, "task_ids": ["3"]}),
                                    ("04_evaluate", {"domain": "bookshop", "seed": 301, "task_ids": ["3"], "n_boot": 10})]
    with pytest.raises(InputError, match="grid of 4 studies"):
        load_study(path)
    spec = yaml.safe_load(path.read_text())
    spec["notebooks"][1]["parameters"]["seed"] = 5  # would silently not be swept
    path.write_text(yaml.safe_dump(spec))
    with pytest.raises(InputError, match=r"\['seed'\] are swept by 'grid' and also set for notebook '04_evaluate'"):
        load_studies(path)
    path.write_text(yaml.safe_dump({**spec, "grid": {"seed": []}}))
    with pytest.raises(InputError, match="non-empty list"):
        load_studies(path)


def test_partitioned_dataset_prunes_folders_and_follows_its_sources(tmp_path, synthetic_results):
    from agentuq_nb.steps.extract import extract

    run = tmp_path / "run"
    extract(synthetic_results, run)
    parts = token_partitions(run)
    assert [p[0].parent.name for p in parts] == sorted(f"task_key={i}" for i in range(12))
    assert all(p[0].parent.parent.name == "domain_key=synthetic" for p in parts)
    picked = token_partitions(run, filters=[("task_id", "in", ["3", "7"])])
    assert [p[0].parent.name for p in picked] == ["task_key=3", "task_key=7"]
    stamp = (run / PARTITIONED_DIR / "_sources.json").read_text()
    extract(synthetic_results, run)  # rewrites tokens.parquet: the dataset must be rebuilt from it
    token_partitions(run)
    assert (run / PARTITIONED_DIR / "_sources.json").read_text() != stamp


def test_task_ids_a_file_name_cannot_hold_keep_their_rows_whole(tmp_path, client):
    """Issue 30: a NUL cut a task id in its hive folder (that trajectory's reward became NaN on --scheduler) and a
    300-character id failed with 'File name too long'. Folders are named by bounded file keys; ids stay whole."""
    from agentuq_nb.io.store.token_table import read_token_partition
    from agentuq_nb.steps.extract import extract
    from agentuq_nb.testing.synthetic import write_synthetic_results

    inline = write_synthetic_results(tmp_path / "src", num_simulations=6, messages_per_simulation=4,
                                     tokens_per_message=3, forms=("inline",), seed=2)
    data = json.loads(inline.read_text())
    odd = ["a\x00b", "a\x00c", "x" * 300, "y" * 300, "../up", "é/ü"]
    renamed = {}
    for sim, new_id in zip(data["simulations"], odd):
        renamed[sim["task_id"]] = new_id
        sim["task_id"] = new_id
    bad = inline.parent / "odd_ids.json"
    bad.write_text(json.dumps(data))
    run = tmp_path / "run"
    extract(bad, run)
    parts = token_partitions(run)
    assert all(len(p[0].parent.name) <= len("task_key=") + 73 for p in parts)
    assert all(p[0].parent.parent.parent == run / PARTITIONED_DIR for p in parts)
    by_task = {}
    for files in parts:
        frame = read_token_partition(files)
        assert frame["task_id"].nunique() == 1  # one task per folder: a\0b and a\0c are not mixed
        by_task[frame["task_id"].iloc[0]] = len(frame)
    whole = read_token_table(run)
    assert by_task == whole.groupby("task_id").size().to_dict()
    assert set(by_task) == set(odd)
    picked = token_partitions(run, filters=[("task_id", "==", "a\x00b")])
    assert len(picked) == 1 and set(read_token_partition(picked[0])["task_id"]) == {"a\x00b"}
    # on the cluster the summaries equal pandas' (rewards included: a cut id made one NaN)
    pandas_run = tmp_path / "pandas"
    shutil.copytree(run, pandas_run)
    shutil.rmtree(pandas_run / PARTITIONED_DIR)
    _, trajs_pd = aggregate(pandas_run)
    _, trajs_dd = aggregate(run, scheduler=client)
    pd.testing.assert_frame_equal(trajs_dd, trajs_pd)
    assert trajs_dd["reward"].notna().all() and set(trajs_dd["task_id"]) == set(odd)


def test_each_worker_gets_one_of_the_api_bases(client):
    from agentuq_nb.distributed import worker_api_base

    bases = ["http://127.0.0.1:8001/v1", "http://127.0.0.1:8002/v1"]
    with connect(client, api_bases=bases):
        assert sorted(client.run(worker_api_base).values()) == bases
    with connect(client):  # registering without a list takes them away again
        assert set(client.run(worker_api_base).values()) == {None}
    assert worker_api_base() is None  # the client process is no worker


# ----------------------------------------------------------------------------- dask.dataframe == pandas

def test_dask_aggregate_and_evaluate_equal_pandas(tmp_path, synthetic_results, client):
    from agentuq_nb.steps.extract import extract

    pandas_run, dask_run = tmp_path / "pandas", tmp_path / "dask"
    extract(synthetic_results, pandas_run)
    shutil.copytree(pandas_run, dask_run)
    turns_pd, trajs_pd = aggregate(pandas_run)
    turns_dd, trajs_dd = aggregate(dask_run, scheduler=client)
    pd.testing.assert_frame_equal(turns_dd, turns_pd)
    pd.testing.assert_frame_equal(trajs_dd, trajs_pd)
    for name in ("turn_summary.csv", "trajectory_summary.csv"):
        assert (dask_run / name).read_bytes() == (pandas_run / name).read_bytes()
    # the same row filter on both paths (on the dataset, whole task folders are skipped)
    subset = [("task_id", "in", ["1", "4", "5"])]
    sub_pd = aggregate(pandas_run, filters=subset)[1]
    sub_dd = aggregate(dask_run, scheduler=client, filters=subset)[1]
    assert set(sub_pd["task_id"]) == {"1", "4", "5"}
    pd.testing.assert_frame_equal(sub_dd, sub_pd)
    aggregate(pandas_run)
    aggregate(dask_run, scheduler=client)
    for role in ("assistant", "combined"):
        m_pd = evaluate(pandas_run, role=role, n_boot=200)
        m_dd = evaluate(dask_run, role=role, n_boot=200, scheduler=client)
        assert m_dd == m_pd
        assert (dask_run / "eval_curves.csv").read_bytes() == (pandas_run / "eval_curves.csv").read_bytes()
    with pytest.raises(ValueError, match="no trajectory has role 'nobody'"):
        evaluate(dask_run, role="nobody", scheduler=client)
    # a full estimator name reads its own role's rows on the cluster (not --role's)
    assert evaluate(dask_run, uncertainty="user.avg_token_nll", n_boot=50, scheduler=client) == \
        evaluate(pandas_run, uncertainty="user.avg_token_nll", n_boot=50)


def test_aggregate_and_evaluate_commands_take_the_scheduler_address(tmp_path, synthetic_results, client):
    from typer.testing import CliRunner

    from agentuq_nb.cli import app

    runner = CliRunner()
    run_dir = tmp_path / "run"
    assert runner.invoke(app, ["extract", str(synthetic_results), "--out", str(run_dir)]).exit_code == 0
    address = client.scheduler.address
    done = runner.invoke(app, ["aggregate", str(run_dir), "--scheduler", address])
    assert done.exit_code == 0, done.output
    assert (run_dir / PARTITIONED_DIR).is_dir()  # read as the task-partitioned dataset on the cluster
    on_cluster = (run_dir / "trajectory_summary.csv").read_bytes()
    done = runner.invoke(app, ["evaluate", str(run_dir), "--scheduler", address, "--n-boot", "100"])
    assert done.exit_code == 0, done.output
    cluster_metrics = json.loads((run_dir / "eval_metrics.json").read_text())
    assert runner.invoke(app, ["aggregate", str(run_dir)]).exit_code == 0
    assert (run_dir / "trajectory_summary.csv").read_bytes() == on_cluster
    assert runner.invoke(app, ["evaluate", str(run_dir), "--n-boot", "100"]).exit_code == 0
    assert json.loads((run_dir / "eval_metrics.json").read_text()) == cluster_metrics


# ----------------------------------------------------------------------------- simulation and scoring

@pytest.mark.slow
def test_cluster_simulation_equals_in_process_and_resumes(reference_run, tmp_path, client):
    from agentuq_nb.llm import local_model

    out = tmp_path / "cluster"
    run_simulations("bookshop", out, scheduler=client, **SIM_PARAMS)
    assert_same_run(reference_run, out)
    # both worker processes worked, each with its own (once-loaded) model
    assert set(client.run(lambda: local_model._MODEL is not None).values()) == {True}
    # a rerun, on the cluster or in-process, skips every checkpointed simulation
    before = {p.name: p.read_bytes() for p in (out / CHECKPOINT_DIR).iterdir()}
    run_simulations("bookshop", out, scheduler=client, **SIM_PARAMS)
    run_simulations("bookshop", out, **SIM_PARAMS)
    assert {p.name: p.read_bytes() for p in (out / CHECKPOINT_DIR).iterdir()} == before


@pytest.mark.slow
def test_cluster_scoring_equals_in_process(reference_run, tmp_path, client):
    results = reference_run / "results.json"
    a = rescore(results, tmp_path / "rescore_a", progress=False, limit=2)
    b = rescore(results, tmp_path / "rescore_b", progress=False, limit=2, scheduler=client)
    assert a.as_dict() == b.as_dict() and a.scored == 2
    pd.testing.assert_frame_equal(read_token_table(tmp_path / "rescore_b"), read_token_table(tmp_path / "rescore_a"))
    a = score_observations(tmp_path / "obs_a", results=results, progress=False)
    b = score_observations(tmp_path / "obs_b", results=results, progress=False, scheduler=client)
    assert a.as_dict() == b.as_dict() and a.scored == len(SIM_TASKS)
    pd.testing.assert_frame_equal(read_token_table(tmp_path / "obs_b"), read_token_table(tmp_path / "obs_a"))
    again = score_observations(tmp_path / "obs_b", results=results, progress=False, scheduler=client)
    assert again.scored == 0 and again.skipped == len(SIM_TASKS)


@pytest.mark.slow
def test_killed_worker_is_retried_elsewhere_with_nothing_missing_or_duplicated(reference_run, tmp_path, client):
    """A worker of the module's cluster (its model loaded already) is killed while it simulates; its nanny starts a
    new process in its place, which no later test here uses (so this test comes after the others on the cluster)."""
    out = tmp_path / "killed"
    pids = client.run(os.getpid)
    finished: list = []
    runner = threading.Thread(target=lambda: finished.append(
        run_simulations("bookshop", out, scheduler=client, **SIM_PARAMS)))
    runner.start()
    victim, victim_keys = None, []
    deadline = time.monotonic() + 120
    while victim is None and time.monotonic() < deadline:
        for address, keys in client.processing().items():
            keys = [k for k in keys if str(k).startswith("simulate-")]
            if keys:
                victim, victim_keys = address, keys
                break
        time.sleep(0.2)
    assert victim is not None, "no simulation started on the cluster"
    # killed at once: the worker (idle, its model loaded) is inside the simulation, which takes seconds of decoding
    # key "simulate-<task>_<trial>-<run>": that simulation is not checkpointed when its worker dies
    task_id, trial = victim_keys[0].split("-")[1].rsplit("_", 1)
    killed_checkpoint = out / CHECKPOINT_DIR / checkpoint_name("bookshop", task_id, int(trial),
                                                                trial_seeds(300, 1)[int(trial)])
    assert not killed_checkpoint.exists()
    os.kill(pids[victim], signal.SIGKILL)
    runner.join(timeout=600)
    assert not runner.is_alive() and finished == [out / "results.json"]
    assert pids[victim] not in client.run(os.getpid).values()  # the job really ran on another process
    sims = json.loads((out / "results.json").read_text())["simulations"]
    assert [(s["task_id"], s["trial"]) for s in sims] == [(task, 0) for task in SIM_TASKS]
    assert killed_checkpoint.exists() and len(list((out / CHECKPOINT_DIR).glob("*.json"))) == len(SIM_TASKS)
    assert len(list((out / "sidecars").glob("*.jsonl"))) == len(SIM_TASKS)
    assert_same_run(reference_run, out)


# ----------------------------------------------------------------------------- reproduce sweeps

def write_probe_project(root: Path) -> None:
    """A project root with one tiny notebook that records its parameters and its process id."""
    (root / "notebooks").mkdir(parents=True)
    (root / "params").mkdir()
    nb = nbformat.v4.new_notebook()
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
    params = nbformat.v4.new_code_cell('run_dir = ""\nfigures_dir = ""\nseed = 0\nlabel = ""')
    params.metadata["tags"] = ["parameters"]
    nb.cells = [
        nbformat.v4.new_markdown_cell("Records its parameters."), params,
        nbformat.v4.new_code_cell(
            "import json, os, pathlib\n"
            "pathlib.Path(figures_dir).mkdir(parents=True, exist_ok=True)\n"
            "pathlib.Path(figures_dir, 'fig.txt').write_text(label)\n"
            "pathlib.Path(run_dir, 'out.json').write_text(json.dumps({'seed': seed, 'label': label, 'pid': os.getpid()}))"),
    ]
    nbformat.write(nb, root / "notebooks" / "01_probe.ipynb")


@pytest.mark.slow
def test_reproduce_sweep_runs_parallel_papermill_jobs_from_the_cli(tmp_path, monkeypatch):
    """The command from the project folder (in this process: the studies run in the kernels of its cluster's
    workers); a failing study is named, the others still finish."""
    write_probe_project(tmp_path)
    (tmp_path / "params" / "grid.yaml").write_text(yaml.safe_dump(
        {"name": "g", "parameters": {"label": "x"}, "grid": {"seed": [1, 2]}, "notebooks": ["01_probe"]}))
    (tmp_path / "params" / "single.yaml").write_text(yaml.safe_dump(
        {"parameters": {"label": "y", "seed": 9}, "notebooks": ["01_probe"]}))
    (tmp_path / "params" / "bad.yaml").write_text(yaml.safe_dump(
        {"parameters": {"seed": "not-a-number", "label": 3}, "notebooks": ["01_probe"]}))
    monkeypatch.chdir(tmp_path)
    done = run_cli("reproduce", "params/grid.yaml", "params/single.yaml", "params/bad.yaml", "--scheduler", "local:2")
    assert done.returncode == 2 and "1 of 4 studies failed" in done.stderr and "bad:" in done.stderr, \
        done.stdout + done.stderr
    expected = {"g__seed=1": (1, "x"), "g__seed=2": (2, "x"), "single": (9, "y")}
    kernels = set()
    for name, (seed, label) in expected.items():
        out = json.loads((tmp_path / "runs" / name / "out.json").read_text())
        assert (out["seed"], out["label"]) == (seed, label)
        assert (tmp_path / "figures" / name / "fig.txt").read_text() == label
        assert (tmp_path / "runs" / name / "notebooks" / "01_probe.ipynb").exists()
        assert f"done: {tmp_path / 'runs' / name}" in done.stdout
        kernels.add(out["pid"])
    assert len(kernels) == 3  # each study ran in its own kernel
    assert not (tmp_path / "runs" / "bad" / "out.json").exists()

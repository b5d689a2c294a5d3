"""A run's trajectory summary from the recorded ``uq_summary`` alone (issue 15, point 10): what a user
who downloaded only the results JSONs of the AgentUQ release can evaluate.

The reference is the same results extracted *with* their sidecars and aggregated from the token
rows; the recorded summaries are computed here from the sidecar rows with agentuq's definitions
(:func:`agentuq_nb.records.summary.uq_summary`, what the simulator writes)."""
from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import yaml

from agentuq_nb.estimators import available
from agentuq_nb.io.errors import InputError
from agentuq_nb.io.store.rundir import RunDir
from agentuq_nb.pipeline import paper
from agentuq_nb.records.summary import AGENTUQ_SUMMARY, uq_summary
from agentuq_nb.steps.aggregate import aggregate
from agentuq_nb.steps.compare_estimators import compare_estimators
from agentuq_nb.steps.extract import extract
from agentuq_nb.steps.recorded_summary import summarize_recorded
from agentuq_nb.testing.synthetic import write_synthetic_results
from agentuq_nb.uq import read_trajectory_summary

ROOT = Path(__file__).resolve().parents[1]
RECORDED = ["total_tokens", *AGENTUQ_SUMMARY]


def with_recorded_summaries(results: Path, scale: float = 1.0) -> Path:
    """Write into every simulation the uq_summary of its sidecar rows (log-probs scaled by ``scale``)."""
    data = json.loads(results.read_text())
    for sim in data["simulations"]:
        rows = []
        for path in sorted({m["raw_data"]["uq_logprobs"]["path"] for m in sim["messages"]
                            if (m.get("raw_data") or {}).get("uq_logprobs")}):
            for line in (results.parent / path).read_text().splitlines():
                row = json.loads(line)
                row["chosen_logprob"] *= scale
                row["topk_logprobs"] = [v * scale for v in row["topk_logprobs"]]
                rows.append(row)
        sim["uq_summary"] = uq_summary(rows)
    results.write_text(json.dumps(data))
    return results


@pytest.fixture
def sidecar_results(tmp_path) -> Path:
    results = write_synthetic_results(tmp_path / "src", num_simulations=10, messages_per_simulation=6,
                                      tokens_per_message=5, forms=("sidecar",), domain="retail")
    return with_recorded_summaries(results)


def test_the_recorded_summary_equals_the_summary_of_the_token_rows(tmp_path, sidecar_results):
    extract(sidecar_results, tmp_path / "full")
    _, full = aggregate(tmp_path / "full")
    recorded = summarize_recorded(sidecar_results, tmp_path / "recorded")
    assert recorded.equals(read_trajectory_summary(tmp_path / "recorded"))
    keys = ["task_id", "trial", "seed", "role"]
    ours = full[full["role"].isin(["assistant", "user", "combined"])].set_index(keys).sort_index()
    theirs = recorded.set_index(keys).sort_index()
    assert list(theirs.index) == list(ours.index)
    for column in RECORDED:
        np.testing.assert_allclose(theirs[column].astype(float), ours[column].astype(float), rtol=1e-9, err_msg=column)
    np.testing.assert_array_equal(theirs["reward"], ours["reward"])
    # the registry lists the recorded statistics only, and they rank as the full run's do
    names = set(available(tmp_path / "recorded"))
    assert {"assistant.avg_token_nll", "user.mean_topk_entropy", "combined.min_chosen_prob"} <= names
    assert not any(n.endswith((".max_token_nll", ".mean_full_entropy")) for n in names)
    wanted = ["assistant.avg_token_nll", "assistant.mean_topk_entropy", "combined.trajectory_nll"]
    a = compare_estimators(tmp_path / "full", names=wanted, n_boot=50).set_index("estimator")
    b = compare_estimators(tmp_path / "recorded", names=wanted, n_boot=50).set_index("estimator")
    np.testing.assert_allclose(b.loc[wanted, "auroc"], a.loc[wanted, "auroc"], rtol=1e-12)
    assert RunDir(tmp_path / "recorded").manifest().step == "recorded_summary"


def test_what_the_recorded_summary_refuses(tmp_path, sidecar_results):
    data = json.loads(sidecar_results.read_text())
    del data["simulations"][3]["uq_summary"]
    broken = tmp_path / "partial.json"
    broken.write_text(json.dumps(data))
    with pytest.raises(InputError, match=r"partial.json: 1 of 10 simulations have no uq_summary"):
        summarize_recorded(broken, tmp_path / "a")
    data = json.loads(sidecar_results.read_text())
    data["simulations"][1]["task_id"], data["simulations"][1]["seed"] = data["simulations"][0]["task_id"], \
        data["simulations"][0]["seed"]
    twice = tmp_path / "twice.json"
    twice.write_text(json.dumps(data))
    with pytest.raises(InputError, match=r"\(task_id, trial, seed\) = \('0', 0, 1000\) repeats"):
        summarize_recorded(twice, tmp_path / "b")
    extract(sidecar_results, tmp_path / "extracted")
    with pytest.raises(InputError, match="holds token tables"):
        summarize_recorded(sidecar_results, tmp_path / "extracted")
    assert not (tmp_path / "a").exists() or not list((tmp_path / "a").glob("*.parquet"))


def release_without_sidecars(tmp_path: Path, keep: tuple[str, ...] = ()) -> Path:
    """The release layout (results JSON per model × domain, sidecars referenced by foreign absolute
    paths; both models' sidecars have the same names) with only the sidecar folders of the release
    prefixes in ``keep`` downloaded."""
    from tests.test_paper import STAND_IN_MODELS, relabel

    artifacts = tmp_path / "tau2-uq-artifacts"
    for prefix, (_, _, scale) in STAND_IN_MODELS.items():
        results = write_synthetic_results(tmp_path / prefix, num_simulations=8, messages_per_simulation=6,
                                          tokens_per_message=5, forms=("sidecar",), domain="bookshop",
                                          seed=int(scale * 10))
        data = json.loads(results.read_text())
        data["info"]["agent_info"] = {"llm": "synthetic"}
        data["info"]["user_info"] = {"llm": "synthetic"}
        data["info"]["environment_info"] = {"domain_name": "bookshop"}
        results.write_text(json.dumps(data))
        relabel(with_recorded_summaries(results, scale), artifacts, prefix, "retail")
        if prefix not in keep:
            shutil.rmtree(artifacts / "uq_logprobs" / f"{prefix}_retail")
    return artifacts


def test_the_paper_table_reproduces_from_the_results_jsons_alone(tmp_path):
    artifacts = release_without_sidecars(tmp_path)
    said: list[str] = []
    runs = paper.prepare_all(artifacts, tmp_path / "runs", progress=False, log=said.append)
    assert len(said) == 2 and all("no token sidecars" in line and "dynamics_agent_nll" in line for line in said)
    assert paper.with_token_rows(runs) == {}
    assert "2 of 2 result sets have no token sidecars" in paper.sidecar_needs(runs)
    assert set(paper.inventory(runs)["source"]) == {"recorded uq_summary"}
    table = paper.auroc_table(runs, n_boot=50)
    nll = table[table["estimator"] == paper.PUBLISHED_ESTIMATOR].set_index("model")
    assert nll.loc["gpt-4.1", "published_auroc"] == 0.597 and nll.loc["Kimi-K2.5", "published_auroc"] == 0.469
    assert nll["auroc"].between(0, 1).all()
    # prepared again: nothing is redone
    stamps = {p: p.stat().st_mtime_ns for p in (tmp_path / "runs").rglob("*.parquet")}
    paper.prepare_all(artifacts, tmp_path / "runs", progress=False, log=said.append)
    assert {p: p.stat().st_mtime_ns for p in (tmp_path / "runs").rglob("*.parquet")} == stamps
    # without a recorded summary either, the error still says to download the sidecars
    for path in artifacts.rglob("*.json"):
        data = json.loads(path.read_text())
        for sim in data["simulations"]:
            sim.pop("uq_summary", None)
        path.write_text(json.dumps(data))
    with pytest.raises(paper.SidecarsNotFound, match="huggingface-cli download"):
        paper.prepare_all(artifacts, tmp_path / "runs2", progress=False, log=said.append)


@pytest.mark.slow
def test_the_paper_notebook_runs_on_the_results_jsons_alone(tmp_path):
    from agentuq_nb.pipeline.reproduce import run_study

    artifacts = release_without_sidecars(tmp_path)
    spec = yaml.safe_load((ROOT / "params" / "paper.yaml").read_text())
    spec["parameters"].update(artifacts_dir=str(artifacts), n_boot=50)
    params = tmp_path / "paper.yaml"
    params.write_text(yaml.safe_dump(spec))
    run_dir = run_study(params, root=ROOT, output_root=tmp_path, log=lambda *_: None)
    table = pd.read_csv(RunDir(run_dir).file("paper_auroc_table"))
    assert set(table.loc[table["estimator"] == paper.PUBLISHED_ESTIMATOR, "published_auroc"]) == {0.597, 0.469}
    executed = (run_dir / "notebooks" / "09_paper_figures.ipynb").read_text()
    assert "result sets have no token sidecars" in executed and "dynamics figure skipped" in executed
    assert not list((tmp_path / "figures" / "paper").glob("*dynamics_agent_nll.*"))


def test_a_partial_download_never_gives_one_model_the_other_models_sidecars(tmp_path):
    """Only GPT-4.1's sidecar folder downloaded: the Kimi results have the same sidecar names, but the
    rows are GPT's - Kimi's set falls back to its recorded summary instead of reading them."""
    artifacts = release_without_sidecars(tmp_path, keep=("gpt41_kimik25",))
    said: list[str] = []
    runs = paper.prepare_all(artifacts, tmp_path / "runs", progress=False, log=said.append)
    source = {s.model: src for s, src in zip(runs, paper.inventory(runs)["source"])}
    assert source == {"gpt-4.1": "token sidecars", "Kimi-K2.5": "recorded uq_summary"}
    assert len(said) == 1 and said[0].startswith("Kimi-K2.5 × retail: no token sidecars")
    kimi = next(run for s, run in runs.items() if s.model == "Kimi-K2.5")
    recorded = read_trajectory_summary(kimi)
    expected = [json.loads(p.read_text()) for p in artifacts.rglob("Kimi-K2.5_retail.json")][0]
    nll = {s["task_id"]: s["uq_summary"]["assistant"]["avg_token_nll"] for s in expected["simulations"]}
    got = recorded[recorded["role"] == "assistant"].set_index("task_id")["avg_token_nll"]
    assert got.to_dict() == pytest.approx(nll)


def test_odd_recorded_summaries_are_counted_not_lost_without_a_word(tmp_path, sidecar_results):
    from agentuq_nb.io.input_warnings import InputDataWarning

    data = json.loads(sidecar_results.read_text())
    sims = data["simulations"]
    sims[0]["uq_summary"]["agent"] = sims[0]["uq_summary"].pop("assistant")   # renamed role
    sims[1]["uq_summary"]["assistant"]["avg_token_nll"] = "abc"                # not a number
    sims[2]["uq_summary"]["assistant"]["mean_topk_entropy"] = None             # missing
    sims[3]["uq_summary"]["user"] = [1, 2]                                     # not a mapping
    sims[4]["uq_summary"]["assistant"]["min_chosen_prob"] = True               # a boolean is not a number
    odd = tmp_path / "odd.json"
    odd.write_text(json.dumps(data))
    with pytest.warns(InputDataWarning) as caught:
        summary = summarize_recorded(odd, tmp_path / "run")
    said = {w.message.kind: w.message for w in caught if isinstance(w.message, InputDataWarning)}
    assert set(said) == {"uq_summary_without_assistant", "uq_summary_unknown_role", "uq_summary_value_not_a_number",
                         "uq_summary_value_missing", "uq_summary_role_not_a_mapping"}
    assert said["uq_summary_value_not_a_number"].count == 2 and "avg_token_nll = 'abc'" in str(
        said["uq_summary_value_not_a_number"])
    assert RunDir(tmp_path / "run").manifest().warnings["uq_summary_unknown_role"]["count"] == 1
    assert (summary["role"] == "agent").sum() == 1 and summary["role"].notna().all()

"""params/paper.yaml: the AgentUQ paper's figures from its released artifacts, tested on a stand-in.

The real data (Hugging Face ``changdae/tau2-uq-artifacts``) cannot be downloaded here. The stand-in
has its layout: one τ²-bench results JSON per agent model × domain, named as in the release
(``gpt41_kimik25_<domain>.json``, ``Kimi-K2.5_<domain>.json``), whose messages record their agentuq
sidecars as absolute paths on another machine, and the sidecars in one folder per result set with
agentuq's names - identical names for both models, as in the release. Its trajectories are two
synthetic bookshop trajectories whose token rows are agentuq sidecars (every key agentuq writes, in
its order: ``agentuq_nb.testing.synthetic``), relabelled as the four model × domain sets; the "Kimi"
copies have their log-probs scaled so that reading the wrong model's sidecars would show, and
rewards are set to one success and one failure per set so that the AUROC is defined (the stand-in
tests the plumbing, not the model; the notebook's kernel scores the user messages on the embedded
model). Sidecars written by the simulator itself are read end to end by the smoke study
(tests/test_end_to_end.py).
"""
from __future__ import annotations

import json
import shutil
from pathlib import Path

import nbformat
import numpy as np
import pandas as pd
import pytest
import yaml

from agentuq_nb.io.errors import InputError
from agentuq_nb.io.store.rundir import RunDir
from agentuq_nb.pipeline import paper
from agentuq_nb.pipeline.reproduce import load_study, run_study

ROOT = Path(__file__).resolve().parents[1]
FOREIGN_SIDECAR_DIR = "/home/agentuq/tau2-bench/data/uq_logprobs"
#: release file prefix → (agent model, user model, log-prob scale of the stand-in copy)
STAND_IN_MODELS = {"gpt41_kimik25": ("gpt-4.1", "Kimi-K2.5", 1.0), "Kimi-K2.5": ("Kimi-K2.5", "Kimi-K2.5", 1.5)}
STAND_IN_DOMAINS = ("retail", "telecom")


def relabel(results: Path, out: Path, prefix: str, domain: str, rewards: list[float] | None = None) -> None:
    """Copy a results file and its sidecars into the release layout under ``out`` as ``prefix``'s ``domain`` set."""
    agent, user, scale = STAND_IN_MODELS[prefix]
    data = json.loads(results.read_text())
    info = data["info"]
    info["agent_info"]["llm"], info["user_info"]["llm"] = agent, user
    info["environment_info"]["domain_name"] = domain
    sidecar_dir = out / "uq_logprobs" / f"{prefix}_{domain}"
    sidecar_dir.mkdir(parents=True, exist_ok=True)
    for i, sim in enumerate(data["simulations"]):
        if rewards is not None:
            sim["reward_info"]["reward"] = rewards[i]
        for m in sim["messages"]:
            ref = (m.get("raw_data") or {}).get("uq_logprobs")
            if not ref:
                continue
            source = results.parent / ref["path"]
            name = source.name.replace("logprobs_bookshop_", f"logprobs_{domain}_")
            ref["path"] = f"{FOREIGN_SIDECAR_DIR}/{name}"
            if (sidecar_dir / name).exists():
                continue
            rows = [json.loads(line) for line in source.read_text().splitlines() if line.strip()]
            for row in rows:
                row["domain"] = domain
                row["model"] = agent if row["role"] == "assistant" else user
                row["chosen_logprob"] *= scale
                row["topk_logprobs"] = [lp * scale for lp in row["topk_logprobs"]]
            (sidecar_dir / name).write_text("".join(json.dumps(r) + "\n" for r in rows))
    (out / "trajectories").mkdir(parents=True, exist_ok=True)
    (out / "trajectories" / f"{prefix}_{domain}.json").write_text(json.dumps(data))


def test_missing_artifacts_dir_says_how_to_download(tmp_path):
    with pytest.raises(FileNotFoundError, match="huggingface-cli download changdae/tau2-uq-artifacts"):
        paper.discover(tmp_path / "tau2-uq-artifacts")
    (tmp_path / "empty").mkdir()
    (tmp_path / "empty" / "card.json").write_text('{"name": "not results"}')
    with pytest.raises(FileNotFoundError, match="no τ²-bench results JSON"):
        paper.discover(tmp_path / "empty")


def test_paper_study_is_not_part_of_make_reproduce():
    study = load_study(ROOT / "params" / "paper.yaml")
    assert [nb for nb, _ in study.notebooks] == ["09_paper_figures"]
    assert "artifacts_dir" in study.notebooks[0][1]
    assert "09_paper_figures" not in (ROOT / "params" / "quickstart.yaml").read_text()
    assert "PARAMS ?= params/quickstart.yaml" in (ROOT / "Makefile").read_text()


@pytest.mark.parametrize("model, domain, value", [
    ("gpt-4.1", "retail", 0.597), ("openai/gpt-4.1-2025-04-14", "telecom", 0.624), ("Kimi-K2.5", "retail", 0.469),
    ("moonshot/kimi-k2.5", "telecom", 0.645), ("gpt-4.1", "airline", None), ("gpt-4o", "retail", None),
])
def test_published_values_are_found_by_model_name(model, domain, value):
    assert paper.published_auroc(model, domain) == value


def stand_in_results(folder: Path, **synthetic) -> Path:
    """Two synthetic bookshop trajectories with agentuq sidecars, their info saying who played agent and user."""
    from agentuq_nb.testing.synthetic import write_synthetic_results

    results = write_synthetic_results(folder, num_simulations=2, forms=("sidecar",), domain="bookshop", **synthetic)
    data = json.loads(results.read_text())
    data["info"].setdefault("agent_info", {})["llm"] = "synthetic"
    data["info"].setdefault("user_info", {})["llm"] = "synthetic"
    data["info"].setdefault("environment_info", {})["domain_name"] = "bookshop"
    results.write_text(json.dumps(data))
    return results


def test_sidecars_with_the_same_names_are_told_apart_by_model(tmp_path):
    results = stand_in_results(tmp_path / "sim", messages_per_simulation=4, tokens_per_message=3)
    artifacts = tmp_path / "artifacts"
    for prefix in STAND_IN_MODELS:
        relabel(results, artifacts, prefix, "retail")
    sets = paper.discover(artifacts)
    assert [(s.model, s.domain) for s in sets] == [("gpt-4.1", "retail"), ("Kimi-K2.5", "retail")]
    index = paper.sidecar_index(artifacts)
    assert len(index) == 2 and len(set(map(frozenset, index.values()))) == 1  # the same names in both folders
    for s in sets:
        folder = paper.locate_sidecars(s, artifacts, index)
        prefix = "gpt41_kimik25" if s.model == "gpt-4.1" else "Kimi-K2.5"
        assert folder == artifacts / "uq_logprobs" / f"{prefix}_retail"
    # two copies of Kimi's sidecars and none of GPT's: ambiguous for Kimi; GPT's are simply not there
    shutil.rmtree(artifacts / "uq_logprobs" / "gpt41_kimik25_retail")
    shutil.copytree(artifacts / "uq_logprobs" / "Kimi-K2.5_retail", artifacts / "copy" / "Kimi-K2.5_retail")
    gpt, kimi = sets
    with pytest.raises(InputError, match="sidecars named like .* keep one copy"):
        paper.locate_sidecars(kimi, artifacts)
    with pytest.raises(paper.SidecarsNotFound, match="generated by .*kimi.*, not by agent 'gpt-4.1'"):
        paper.locate_sidecars(gpt, artifacts)


def _independent_agent_nll(sidecar_dir: Path, task_id: str) -> float:
    nll = [-json.loads(line)["chosen_logprob"] for f in sidecar_dir.glob(f"logprobs_*_{task_id}_trial*.jsonl")
           for line in f.read_text().splitlines() if line.strip() and json.loads(line)["role"] == "assistant"]
    return float(np.mean(nll))


@pytest.mark.slow
def test_paper_params_on_a_stand_in_with_the_release_layout(tmp_path):
    # the trajectories of a small bookshop run (greeting, user, agent, tool, agent, user; a simulation of the embedded
    # model in the process before: its load and decoding were a third of the test's CPU time)
    results = stand_in_results(tmp_path / "sim", messages_per_simulation=6, tokens_per_message=12)
    task_ids = [s["task_id"] for s in json.loads(results.read_text())["simulations"]]
    artifacts = tmp_path / "tau2-uq-artifacts"
    rewards = {"retail": [1.0, 0.0], "telecom": [0.0, 1.0]}
    for prefix in STAND_IN_MODELS:
        for domain in STAND_IN_DOMAINS:
            relabel(results, artifacts, prefix, domain, rewards[domain])

    spec = yaml.safe_load((ROOT / "params" / "paper.yaml").read_text())
    spec["parameters"].update(artifacts_dir=str(artifacts), n_boot=50,
                              observation_scorer_llm="local/smollm2-135m-instruct", observation_limit=1)
    params = tmp_path / "paper.yaml"
    params.write_text(yaml.safe_dump(spec))
    run_dir = run_study(params, root=ROOT, output_root=tmp_path, log=lambda *_: None)

    figures_dir = tmp_path / "figures" / "paper"
    for name in ("observation_user_nll_density_gpt-4.1", "observation_user_nll_density_Kimi-K2.5", "paper_dynamics_agent_nll"):
        assert (figures_dir / f"{name}.png").stat().st_size > 1000, name
        assert (figures_dir / f"{name}.pdf").exists()
    table = pd.read_csv(RunDir(run_dir).file("paper_auroc_table"))
    nll = table[table["estimator"] == paper.PUBLISHED_ESTIMATOR].set_index(["model", "domain"])
    assert sorted(nll.index) == [("Kimi-K2.5", d) for d in STAND_IN_DOMAINS] + [("gpt-4.1", d) for d in STAND_IN_DOMAINS]
    for (model, domain), row in nll.iterrows():
        assert row["published_auroc"] == paper.PUBLISHED_AGENT_NLL_AUROC[("GPT-4.1" if model == "gpt-4.1" else model, domain)]
        prefix = "gpt41_kimik25" if model == "gpt-4.1" else "Kimi-K2.5"
        # the set's agent NLL, recomputed from its own sidecar files, gives the same ranking
        agent_nll = [_independent_agent_nll(artifacts / "uq_logprobs" / f"{prefix}_{domain}", t) for t in task_ids]
        failed = np.array(rewards[domain]) < 1.0
        expected = 0.5 if agent_nll[0] == agent_nll[1] else float(agent_nll[int(np.argmax(failed))] > agent_nll[int(np.argmin(failed))])
        assert row["auroc"] == pytest.approx(expected)
        summary = pd.read_parquet(run_dir / f"{paper.model_slug(model)}_{domain}" / "trajectory_summary.parquet")
        ours = summary[(summary["role"] == "assistant") & (summary["scorer"] == "self")].sort_values("task_id")
        np.testing.assert_allclose(ours["avg_token_nll"], agent_nll, rtol=1e-9)
        turns = pd.read_parquet(run_dir / f"{paper.model_slug(model)}_{domain}" / "turn_summary.parquet")
        assert ((turns["role"] == "observation_user") & (turns["scorer"] == "agent_llm")).any()
    executed = nbformat.read(run_dir / "notebooks" / "09_paper_figures.ipynb", as_version=4)
    printed = "".join(o.get("text", "") + json.dumps(o.get("data", {})) for c in executed.cells if c.cell_type == "code"
                      for o in c.outputs)
    assert "0.597" in printed and "0.645" in printed

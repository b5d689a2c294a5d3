"""Every figure function renders legibly: no two texts overlap, and no legend or boxed note covers data.

Each public figure function of ``agentuq_nb.figures`` (``*_figure``, ``*_diagram``) is drawn from small inputs made
by the package itself (a synthetic run taken through extract, aggregate, the black-box families, SAUP, the estimator
table and compare-runs) or shaped like its real input, and checked with ``figures.layout.layout_problems`` on the
drawn figure. A new figure function without a case here fails :func:`test_every_figure_function_is_checked`.
"""
from __future__ import annotations

import ast
import importlib
import inspect
import pkgutil
from pathlib import Path
from types import SimpleNamespace

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import nbformat  # noqa: E402
import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402
import pytest  # noqa: E402

import agentuq_nb.figures as figures_pkg  # noqa: E402
from agentuq_nb.estimators.scores import estimator_rows
from agentuq_nb.figures.layout import layout_problems, legend_overlaps, text_overlaps  # noqa: E402
from agentuq_nb.io.store.artifacts import read_estimator_table
from agentuq_nb.steps.compare_estimators import compare_estimators
from agentuq_nb.steps.compare_runs import compare_runs
from agentuq_nb.steps.evaluate import evaluate

ROOT = Path(__file__).resolve().parents[1]
KEYS = ["domain", "task_id", "trial", "seed"]


def figure_functions() -> set[str]:
    names = set()
    for info in pkgutil.iter_modules(figures_pkg.__path__):
        module = importlib.import_module(f"agentuq_nb.figures.{info.name}")
        for name, obj in inspect.getmembers(module, inspect.isfunction):
            if obj.__module__ == module.__name__ and not name.startswith("_") and (
                    name.endswith("_figure") or name.endswith("_diagram")):
                names.add(f"{info.name}.{name}")
    return names


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    """Two synthetic runs (10 and 6 tasks × 3 trials), taken through extract, aggregate and the black-box families
    (hash embeddings); the first also through SAUP and the estimator table; and compare-runs across them."""
    from agentuq_nb.steps.aggregate import aggregate
    from agentuq_nb.steps.blackbox import BlackBoxConfig, ensure_blackbox
    from agentuq_nb.steps.extract import extract
    from agentuq_nb.steps.saup import saup as run_saup
    from agentuq_nb.testing.synthetic import write_synthetic_results

    tmp = tmp_path_factory.mktemp("figures")
    out = {}
    for name, sims, seed in (("run_a", 10, 0), ("run_b", 6, 1)):
        results = write_synthetic_results(tmp / f"src_{name}", num_simulations=sims, messages_per_simulation=8,
                                          tokens_per_message=6, seed=seed, trials=3, signal=0.6)
        run = tmp / name
        extract(results, run)
        aggregate(run)
        ensure_blackbox(run, BlackBoxConfig(embedder="hash"))
        out[name] = run
    run_saup(out["run_a"], embedder="hash", k_folds=3)
    compare_estimators(out["run_a"], n_boot=20, blackbox=False)
    out["board"] = compare_runs([out["run_a"], out["run_b"]], tmp / "board", n_boot=20)
    out["detector"] = _detector_study(tmp)
    return out


def _detector_study(tmp: Path):
    """The detector study (every protocol, the ablation, early detection) on four small synthetic runs of two domains
    (the detector tests' generator; hash embeddings). Two folds within a run and 20 resamples: the figures draw the
    same rows (every protocol, feature set and early cut-off) as three folds and 50 did, for ~20 % less work."""
    from tests.test_detector import write_run

    from agentuq_nb.pipeline.detector_study import run_study

    results = [write_run(tmp / f"agent{i}_{domain}.json", f"agent{i}", domain, n_tasks=8, seed=i)
               for i, domain in enumerate(("airline", "airline", "retail", "retail"))]
    return run_study(results, tmp / "detector_study", n_boot=20, embedder="hash", n_splits=2, early_turns=(1, 2),
                     early_fractions=(0.5,))


def _synthetic_turns(seed: int = 0) -> pd.DataFrame:
    """Rows shaped like ``action_turns``: three decision points of one trajectory, K = 4."""
    rows = []
    for d, (sizes, labels, taken) in enumerate([
            ([4], ['get_order(order_id="#W1001")'], 0),
            ([2, 1, 1], ['text: "Sure, let me look that up for you right away"', 'cancel_order(order_id="#W1001")',
                         "malformed call"], 1),
            ([0, 3, 1], ['text: "I have refunded the order to your original card"', 'text: "Done."', "text: ok"], 0)]):
        rows.append({**dict(zip(KEYS, ["bookshop", "7", 0, 300])), "decision_idx": d, "turn_idx": 2 * d + 1, "k": 4,
                     "cluster_sizes": sizes, "cluster_labels": labels, "taken_cluster": taken,
                     "action_agreement": sizes[taken] / 4, "action_clusters": sum(s > 0 for s in sizes),
                     "taken_action": labels[taken], "taken_kind": "tool_call"})
    return pd.DataFrame(rows)


def _cases(runs) -> dict:
    """``{module.function: a callable drawing it}``."""
    from agentuq_nb import evaluation
    from agentuq_nb.evaluation.agent_comparison import aci_stream, leaderboard, success_rate_intervals
    from agentuq_nb.evaluation.calibration import reliability_table
    from agentuq_nb.evaluation.metrics import failure_curves
    from agentuq_nb.figures import (
        actions,
        blackbox,
        calibration,
        conformal,
        dynamics,
        estimators,
        failure_prediction,
        intervention,
        observation,
        run_leaderboard,
        structural,
    )
    from agentuq_nb.figures import detector as detector_figures
    from agentuq_nb.figures import judges as judge_figures
    from agentuq_nb.figures import (
        runs as run_figures,
    )
    from agentuq_nb.figures import (
        saup as saup_figures,
    )
    from agentuq_nb.io.store.rundir import RunDir
    from agentuq_nb.pipeline import conformal as rc
    from agentuq_nb.pipeline.judges import COLUMNS as JUDGE_COLUMNS
    from agentuq_nb.uq import dynamics as uq_dynamics
    from agentuq_nb.uq import read_trajectory_summary, read_turn_summary, saup

    run = runs["run_a"]
    table = read_estimator_table(run)
    turns = read_turn_summary(run)
    trajectories = read_trajectory_summary(run)
    rewards = trajectories.drop_duplicates(KEYS)
    result = evaluate(run, n_boot=20)
    curves = pd.read_csv(run / "eval_curves.csv")
    rows = estimator_rows(run, "assistant.avg_token_nll")
    failed = rows["reward"] < 1.0
    agent = uq_dynamics.read_agent_turns(run)
    curve = evaluation.dynamics_curve(agent, n_bins=5)
    warning, _ = evaluation.early_warning_table(run, n_boot=20)
    _, steps = saup.saup(run, embedder="hash", k_folds=3)
    rng = np.random.default_rng(0)
    prob = rng.uniform(0.55, 0.95, 120)
    labels = rng.uniform(size=120) < prob
    bins = {"combined_predictor+length (platt)": reliability_table(prob, labels, 10),
            "num_messages (platt)": reliability_table(np.clip(prob + 0.05, 0, 1), labels, 10)}
    observed = turns.copy()
    obs_user = observed[observed["role"] == "user"].assign(role="observation_user", scorer="agent_llm",
                                                           avg_token_nll=lambda d: d["avg_token_nll"] + 0.4)
    obs_tool = observed[observed["role"] == "user"].assign(role="observation_tool", scorer="agent_llm")
    observed = pd.concat([observed, obs_user, obs_tool], ignore_index=True)
    failed_keys = set(zip(*[rewards.loc[rewards["reward"] < 1.0, c] for c in ("task_id", "trial", "seed")]))
    parts = pd.DataFrame({"part": ["action (agent tokens)", "observation (user + tool)", "total (action + observation)"],
                          "n": [40, 40, 40], "auroc": [0.61, 0.48, 0.57], "auroc_lo": [0.42, 0.3, 0.4],
                          "auroc_hi": [0.8, 0.66, 0.75]})
    split = rc.synthetic_split_coverage((0.1, 0.2), n_cal=60, n_test=60, n_reps=5)
    stream = rc.drift_stream(pd.DataFrame({"task_id": [], "trial": [], "uncertainty": []}), n_synthetic=120)
    path = aci_stream(stream, alpha=0.1, warmup=20, value_col="value")
    rewards_lb = pd.DataFrame([{"agent": agent_name, "domain": "airline", "task_id": str(t), "task": f"airline/{t}",
                                "trial": 0, "reward": float(rng.uniform() < p)}
                               for agent_name, p in (("gpt-4.1_airline_1trial", 0.6), ("ft-gpt-4.1_airline_1trial", 0.5))
                               for t in range(20)])
    board = leaderboard(rewards_lb, q=0.1, n_boot=50, n_perm=99, seed=0, task_col="task")
    rates = success_rate_intervals(rewards_lb, by="agent")
    lowrisk = pd.DataFrame({"task_id": [str(i % 30) for i in range(90)], "trial": [i // 30 for i in range(90)],
                            "uncertainty": rng.uniform(size=90)})
    lowrisk["reward"] = (rng.uniform(size=90) > lowrisk["uncertainty"] * 0.9).astype(float)
    feasible = rc.abstention(lowrisk, alpha=0.5, delta=0.2, seed=0)
    infeasible = rc.abstention(lowrisk.head(20), alpha=0.05, delta=0.05, seed=0)
    summary = pd.DataFrame([
        {"policy": "observe", "action": None, "intervention_rate": 0.0, "success_all": 0.19,
         "success_non_escalated": 0.19},
        *({"policy": p, "action": "defer", "intervention_rate": r, "success_all": s, "success_non_escalated": s + 0.05}
          for p, pts in (("defer", ((0.22, 0.19), (0.48, 0.11))), ("random", ((0.15, 0.19), (0.48, 0.11))))
          for r, s in pts),
        {"policy": "oracle", "action": "defer", "intervention_rate": 0.56, "success_all": 0.19,
         "success_non_escalated": 0.42}])
    for c in ("intervention_rate", "success_all", "success_non_escalated"):
        summary[f"{c}_lo"], summary[f"{c}_hi"] = summary[c] - 0.1, summary[c] + 0.1
    choices = [SimpleNamespace(text=f"Sentence {i}: dogs are loyal companions who love long walks.",
                               token_entropy=rng.uniform(size=20), token_distance=rng.uniform(size=20))
               for i in range(3)]
    probe = SimpleNamespace(prompt="Write three sentences about dogs.", structural=0.41, conceptual=0.22,
                            choices=choices)
    probes = [SimpleNamespace(prompt=p, structural=s, conceptual=c) for p, s, c in (
        ("Who was the first president of the USA?", 0.1, 0.05), ("Write three sentences.", 0.6, 0.5),
        ("Write three sentences about dogs.", 0.58, 0.3), ("Pick a random number between 1 and 100.", 0.5, 0.6))]
    bb_turns = RunDir(run).read_frame("blackbox_turns")
    one = bb_turns[(bb_turns["task_id"] == bb_turns["task_id"].iloc[0]) & (bb_turns["trial"] == 0)]
    b = runs["board"]
    outcomes = pd.DataFrame({"task_id": [str(i // 5) for i in range(135)], "trial": [i % 5 for i in range(135)],
                             "reward": (rng.uniform(size=135) < 0.2).astype(float),
                             "termination": rng.choice(["user_stop", "max_steps", "agent_stop"], 135)})
    tokens = pd.DataFrame({"role": rng.choice(["assistant", "user"], 4000), "scorer": "self",
                           "chosen_logprob": -rng.exponential(0.8, 4000)})
    study = runs["detector"]
    judged = pd.DataFrame([  # shaped like pipeline.judges.judge_rows: two runs, four published prompts each (one
        # beats length), the detector on each, the embedded judge on 12 retail trajectories (its interval past 0.3)
        {"run": run, "prompt": prompt, "kind": kind, "judge_model": "azure/gpt-4o", "n": n, "n_failures": failures,
         "auroc": a, "auroc_lo": a - (0.4 if n < 114 else 0.09), "auroc_hi": min(a + 0.09, 1.0),
         "length_baseline": "num_messages", "length_auroc": length, "prior_n": 40, "prior_auroc": prior,
         "vs_length": "beats" if a - 0.09 > length else "not shown", "cost_per_trajectory_usd": cost,
         "seconds_per_trajectory": None if kind == "published judge" else 0.3 if kind == "detector" else 41.0}
        for run, failures, length, prior, prompts in [
            ("retail", 46, 0.63, 0.63, [("customer_outcome", 0.579, 0.013), ("policy_chain_of_thought", 0.549, 0.016),
                                       ("policy_conversation", 0.617, 0.014), ("quick_triage", 0.522, 0.011),
                                       ("detector (trained on the other runs)", 0.505, 0.0),
                                       ("SmolLM2-135M outcome (first 12)", 0.47, 0.0)]),
            ("telecom", 87, 0.70, 0.571, [("customer_outcome", 0.698, 0.02), ("policy_chain_of_thought", 0.754, 0.023),
                                          ("policy_conversation", 0.717, 0.021), ("quick_triage", 0.93, 0.018),
                                          ("detector (trained on the other runs)", 0.868, 0.0)])]
        for prompt, a, cost in prompts
        for kind in ["detector" if prompt.startswith("detector") else "embedded judge (path demonstration)"
                     if prompt.startswith("SmolLM2") else "published judge"]
        for n in [12 if prompt.startswith("SmolLM2") else 114]]).reindex(columns=JUDGE_COLUMNS)
    return {
        "actions.decision_points_figure": lambda: actions.decision_points_figure(_synthetic_turns(), "task 7 (trial 0)"),
        "actions.estimators_by_outcome_figure": lambda: actions.estimators_by_outcome_figure(
            pd.DataFrame({"action_semantic_entropy_weighted.mean": rng.uniform(size=40),
                          "action_agreement.mean": np.r_[rng.uniform(size=30), [np.nan] * 10],
                          "conceptual_pairwise.mean": rng.uniform(size=40),
                          "tool_name_entropy.mean": rng.uniform(size=40)}), pd.Series(rng.uniform(size=40) < 0.7)),
        "detector.protocols_figure": lambda: detector_figures.protocols_figure(study.detector.protocols),
        "detector.ablation_figure": lambda: detector_figures.ablation_figure(study.ablation),
        "detector.early_detection_figure": lambda: detector_figures.early_detection_figure(study.detector.early),
        "detector.top_features_figure": lambda: detector_figures.top_features_figure(study.detector.top_features),
        "judges.judge_auroc_figure": lambda: judge_figures.judge_auroc_figure(judged),
        "blackbox.trajectory_signals_figure": lambda: blackbox.trajectory_signals_figure(one, "run_a: one trajectory"),
        "blackbox.tracer_readouts_figure": lambda: blackbox.tracer_readouts_figure(b.long),
        "calibration.reliability_diagram": lambda: calibration.reliability_diagram(
            bins, title="Cross-fitted failure probabilities (Platt)\nn = 120 trajectories"),
        "conformal.coverage_nominal_figure": lambda: conformal.coverage_nominal_figure(
            split, "SYNTHETIC data (a method check): split conformal coverage"),
        "conformal.interval_width_figure": lambda: conformal.interval_width_figure(
            split, "SYNTHETIC data (a method check): interval widths"),
        "conformal.leaderboard_figure": lambda: conformal.leaderboard_figure(
            board, 0.1, "Leaderboard: 2 other results files, not this run"),
        "conformal.success_rate_figure": lambda: conformal.success_rate_figure(
            rates, "Success rate: 2 other results files, not this run, 1 trial per task"),
        "conformal.risk_coverage_figure": lambda: (conformal.risk_coverage_figure(feasible, "assistant.avg_token_nll"),
                                                   conformal.risk_coverage_figure(infeasible, "assistant.avg_token_nll")),
        "conformal.aci_stream_figure": lambda: conformal.aci_stream_figure(path, 0.1, True, "synthetic value"),
        "dynamics.dynamics_figure": lambda: dynamics.dynamics_figure(curve),
        "dynamics.dynamics_grid_figure": lambda: dynamics.dynamics_grid_figure(
            {("gpt-4.1", "airline"): curve, ("gpt-4.1", "retail"): curve, ("kimi-k2.5", "airline"): curve}),
        "dynamics.early_warning_figure": lambda: dynamics.early_warning_figure(warning),
        "estimators.estimator_forest_figure": lambda: (estimators.estimator_forest_figure(table),
                                                       estimators.estimator_forest_figure(table, families=["token"])),
        "failure_prediction.roc_figure": lambda: failure_prediction.roc_figure(curves, result, "assistant.avg_token_nll"),
        "failure_prediction.accuracy_rejection_figure": lambda: failure_prediction.accuracy_rejection_figure(
            failure_curves(rng.uniform(size=60), (rng.uniform(size=60) > 0.7).astype(float)),
            {"metrics": {"auarc": 0.31}, "n": 60, "n_failures": 42}, "assistant.avg_token_nll"),
        "failure_prediction.uncertainty_distribution_figure": lambda: failure_prediction.uncertainty_distribution_figure(
            rows["uncertainty"], failed, "assistant.avg_token_nll"),
        "intervention.intervention_curve_figure": lambda: intervention.intervention_curve_figure(summary),
        "observation.user_nll_density_figure": lambda: observation.user_nll_density_figure(observed),
        "observation.tool_surprise_figure": lambda: observation.tool_surprise_figure(observed, failed_keys),
        "observation.auroc_by_part_figure": lambda: observation.auroc_by_part_figure(parts),
        "run_leaderboard.run_leaderboard_figure": lambda: run_leaderboard.run_leaderboard_figure(
            b.leaderboard, b.long, b.runs),
        "runs.simulation_outcomes_figure": lambda: run_figures.simulation_outcomes_figure(outcomes),
        "runs.token_nll_by_role_figure": lambda: run_figures.token_nll_by_role_figure(tokens),
        "runs.agent_turn_nll_figure": lambda: run_figures.agent_turn_nll_figure(turns, rewards),
        "saup.saup_turn_figure": lambda: saup_figures.saup_turn_figure(saup.turn_table(steps), "SAUP: task 1"),
        "structural.probe_sparklines_figure": lambda: structural.probe_sparklines_figure(probe),
        "structural.two_axis_figure": lambda: structural.two_axis_figure(probes),
    }


@pytest.fixture(scope="module")
def cases(runs) -> dict:
    return _cases(runs)


@pytest.fixture(scope="module")
def drawn(cases):
    plt.rcParams["figure.max_open_warning"] = 0  # every figure stays open until its check has run
    out = {}
    for name, draw in cases.items():
        made = draw()
        out[name] = made if isinstance(made, tuple) else (made,)
    yield out
    plt.close("all")


def test_every_figure_function_is_checked(cases):
    missing = figure_functions() - set(cases)
    assert not missing, f"figure functions without a layout case: {sorted(missing)}"


@pytest.mark.parametrize("name", sorted(figure_functions()))
def test_figure_has_no_overlapping_text_and_no_legend_over_data(drawn, name, tmp_path):
    for i, fig in enumerate(drawn[name]):
        problems = layout_problems(fig)
        if problems:  # keep the picture for whoever reads the failure
            fig.savefig(tmp_path / f"{name}_{i}.png", bbox_inches="tight")
        assert problems == [], f"{name} (figure {i}): {problems[:5]} ({tmp_path})"


def test_the_checker_finds_overlapping_text_and_a_legend_over_data():
    fig, ax = plt.subplots(figsize=(3, 2))
    ax.bar(range(40), np.ones(40))
    ax.set_xticks(range(40), [f"task {i}" for i in range(40)])
    assert any("'task 0' overlaps" in p for p in text_overlaps(fig))
    fig, ax = plt.subplots(figsize=(3, 2))
    ax.plot(np.linspace(0, 1, 50), np.linspace(0, 1, 50) ** 0.2, label="a curve through the upper left")
    ax.legend(loc="upper left")
    assert legend_overlaps(fig)
    fig, ax = plt.subplots(figsize=(3, 2), layout="constrained")
    ax.plot([0, 1], [0, 1], label="curve")
    fig.legend(loc="outside lower center")
    ax.set_xticks([0, 0.5, 1], ["0", "0.5", "1"], rotation=40)
    assert layout_problems(fig) == []
    plt.close("all")


def test_no_two_notebooks_save_a_figure_under_one_name():
    """One file name per figure: a name saved by two notebooks of one study would overwrite the first figure."""
    saved: dict[str, str] = {}
    for path in sorted((ROOT / "notebooks").glob("*.ipynb")):
        cells = [c.source for c in nbformat.read(path, as_version=4).cells if c.cell_type == "code"]
        for call in (node for cell in cells for node in ast.walk(ast.parse(cell)) if isinstance(node, ast.Call)):
            func = call.func.attr if isinstance(call.func, ast.Attribute) else getattr(call.func, "id", "")
            if func == "save" and len(call.args) >= 2 and isinstance(call.args[1], ast.Constant):
                name = call.args[1].value
                assert name not in saved, f"figure {name!r} is saved by {saved.get(name)} and {path.name}"
                saved[name] = path.name
    assert {"estimator_forest", "estimator_forest_evaluate", "estimator_forest_saup", "estimator_forest_actions",
            "synthetic_split_coverage", "synthetic_interval_widths"} <= set(saved)

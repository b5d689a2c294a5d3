"""``compare-estimators``: the estimator table of a run (:mod:`agentuq_nb.evaluation.estimator_table`) →
``RUN_DIR/estimator_table.csv`` and the combined predictors' out-of-fold probabilities ``combined_scores.parquet``.

The black-box families are brought up to date first (the blackbox step's :func:`~agentuq_nb.steps.blackbox.run`,
whose status says why where a run cannot have them).
"""
from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Optional

import pandas as pd
from pydantic import Field

from agentuq_nb.estimators.base import combination_families
from agentuq_nb.estimators.scores import estimator_inputs, score_table, with_length_columns
from agentuq_nb.io.store.rundir import RunDir
from agentuq_nb.records.config import NBins
from agentuq_nb.steps.base import (
    BlackBoxEmbedder,
    Command,
    FailureThresholdField,
    GbmGridField,
    NBootField,
    Reporter,
    SeedField,
    Step,
    StepConfig,
)
from agentuq_nb.steps.blackbox import BlackBoxConfig
from agentuq_nb.steps.blackbox import run as blackbox

STEP = Step("compare-estimators", "agentuq-nb compare-estimators RUN_DIR", ("estimator_table", "combined_scores"))


class CompareEstimatorsConfig(StepConfig):
    """How the estimator table is computed: labels, bootstrap, calibration bins, combined predictors, black-box step."""

    failure_threshold: FailureThresholdField
    n_boot: NBootField
    seed: SeedField = Field(description="seed of the bootstrap, the folds and the black-box tuning")
    names: Optional[list[str]] = Field(None, description="only these estimators (default: every one the run holds)")
    n_bins: NBins = Field(10, description="equal-mass bins of the ECE")
    combine: bool = Field(True, description="add the combined predictors' rows")
    combined_input_names: Optional[list[str]] = Field(None, description="inputs of the combined predictor (default: "
                                                      "one estimator per kind of signal)")
    gbm_grid: GbmGridField
    blackbox: bool | BlackBoxConfig = Field(True, description="bring the black-box families (structure, TRACER) up "
                                         "to date first (a config, or True for the default one)")
    embedder: BlackBoxEmbedder = Field(BlackBoxConfig.model_fields["embedder"].default,
                                                        description="sentence embeddings of the black-box signals "
                                                        "(where blackbox is True; a config names its own)")
    reporter: Reporter = Field(default_factory=Reporter, exclude=True,
                               description="what the step says while it runs (nothing, in a library call)")
    progress: bool = Field(False, description="show progress bars (stderr): the texts embedded, the table's rows")

    def blackbox_config(self) -> BlackBoxConfig | None:
        """The black-box step's config with this table's failure threshold and seed (None: not brought up to date)."""
        if self.blackbox is False:
            return None
        signals = self.blackbox if isinstance(self.blackbox, BlackBoxConfig) else BlackBoxConfig(embedder=self.embedder)
        return signals.model_copy(update={"failure_threshold": self.failure_threshold, "seed": self.seed,
                                          "progress": self.progress or signals.progress, "required": False})


def publish_table(run_dir: str | os.PathLike | RunDir, config: CompareEstimatorsConfig = CompareEstimatorsConfig()
                  ) -> pd.DataFrame:
    """Evaluate every estimator available in the run (or ``names``); publish ``RUN_DIR/estimator_table.csv`` and the
    combined predictors' scores. The table alone: :func:`run` makes the summaries and brings the black-box families up
    to date first."""
    from agentuq_nb.evaluation.estimator_table import evaluate_estimators_and_combinations

    folder = RunDir.of(run_dir)
    folder.require_folder(STEP.name)
    with folder.lock(STEP.name):  # from the first read to the commit: based_on is what was read
        table, estimators = score_table(folder, config.names, folder.outcomes(config.failure_threshold))
        out, combined_scores = evaluate_estimators_and_combinations(
            with_length_columns(folder, table), estimators, config.failure_threshold, config.n_boot, config.seed,
            n_bins=config.n_bins, combine=config.combine, combined_input_names=config.combined_input_names, progress=config.progress,
            gbm_grid=config.gbm_grid)
        based_on = folder.based_on(*estimator_inputs(folder, [e for e in estimators if e.family not in combination_families()]))
        with folder.commit(STEP.name) as commit:
            commit.write_with("estimator_table", lambda p: out.to_csv(p, index=False), based_on)
            commit.write_parquet("combined_scores", combined_scores, based_on)
    return out


def compare_estimators(run_dir: str | os.PathLike | RunDir, **options: Any) -> pd.DataFrame:
    """What the command does (:func:`run`: the summaries made where the run has token rows but none, the black-box
    families brought up to date, the table published) with the :class:`CompareEstimatorsConfig` fields as keywords:
    the table (``run`` returns it with the families the run lacks)."""
    return run(run_dir, CompareEstimatorsConfig(**options)).table


@dataclass
class EstimatorTableReport:
    """What ``compare-estimators`` (and ``analyze``) tell about a run's estimator table."""

    table: pd.DataFrame
    path: Path  # where the table was published
    failure_threshold: float
    gaps: list = field(default_factory=list)
    blackbox: Any = None  # the black-box step's status


def run(run_dir: str | os.PathLike | RunDir, config: CompareEstimatorsConfig = CompareEstimatorsConfig()) -> EstimatorTableReport:
    """The table with what a user needs around it: the summaries made first where the run has token rows but no
    summaries (straight after rescore), the black-box families brought up to date, and the families the run lacks
    with the command that adds each (:func:`~agentuq_nb.steps.family_gaps.missing_families`)."""
    import pyarrow.parquet as pq

    from agentuq_nb.steps.aggregate import run as aggregate
    from agentuq_nb.steps.family_gaps import missing_families
    from agentuq_nb.uq.aggregation import summary_counts

    folder = RunDir.of(run_dir)
    if (folder.path.is_dir() and not folder.has("trajectory_summary")
            and any(pq.read_metadata(f).num_rows for f in folder.token_tables())):
        config.reporter.say(f"{folder.path} has token rows but no turn or trajectory summaries: running 'agentuq-nb aggregate "
                     f"{folder.path}' first", warn=True)
        with config.reporter.stage("aggregate", folder.path):
            turns, trajs = aggregate(folder)
        config.reporter.say(summary_counts(turns, trajs), warn=True)
    status = None
    with config.reporter.stage(STEP.name, folder.path):
        if config.blackbox_config() is not None:
            status = blackbox(folder, config.blackbox_config())
            if status.report and "signals" in status.computed:
                r = status.report
                config.reporter.say(blackbox_timing(r))
        table = publish_table(folder, config)
        gaps = missing_families(folder, status.skipped if status is not None else None)
    return EstimatorTableReport(table, folder.file("estimator_table"), config.failure_threshold, gaps, status)


def blackbox_timing(report: dict) -> str:
    """How long the black-box signals took, the one-off distillation of the static embedding table (once per
    machine, then read from beside the embedding cache) said on its own line, apart from the run's own work."""
    distilled = float(report.get("distill_seconds") or 0.0)
    own = float(report["seconds"]) - distilled
    line = (f"black-box signals: {report['trajectories']} trajectories, {report['messages']} messages in {own:.1f} s "
            f"({report['embed_seconds']:.1f} s embedding {report['texts_embedded']} texts)")
    if distilled > 0:
        line += (f"\nand {distilled:.1f} s before them distilling the static MiniLM table, once per machine (kept beside "
                 "the embedding cache: later runs read it in a fraction of a second; make setup does it ahead)")
    return line


def show(report: EstimatorTableReport, run_dir: Path, config: CompareEstimatorsConfig, say: Reporter) -> None:
    """What compare-estimators (and analyze) print of the table (the report's view of it: figures.report), the notes
    that say how to read it, where it is, why no AUROC is defined (said once), and the families the run lacks with
    the command that adds each, its cost and the model it runs."""
    from agentuq_nb.evaluation.estimator_table import SORT_COLUMN
    from agentuq_nb.figures.report import estimator_notes, estimator_view, undefined_reason

    table = report.table
    undefined = undefined_reason(table)
    if undefined is None:
        say.say(estimator_view(table).to_string(index=False))
        for note in estimator_notes(table, SORT_COLUMN):
            say.say(f"  {note}")
    else:
        say.say(f"note: {undefined} (failure threshold {report.failure_threshold:g}); the table lists "
                f"{len(table)} estimators without it", warn=True)
    say.say(f"→ {report.path}")
    if undefined is None:
        one_class = table[table["auroc"].isna() & ((table["n_failures"] == 0) | (table["n_failures"] == table["n"]))]
        if len(one_class):
            say.say(f"note: AUROC is undefined for {len(one_class)} estimator(s) whose scored trajectories hold one "
                    f"outcome only: {', '.join(one_class['estimator'].astype(str).head(5))}"
                    + (" …" if len(one_class) > 5 else ""), warn=True)
    if report.gaps:
        say.say("families not computed for this run (what each needs: the command that adds it):\n"
                + "\n".join(f"  - {gap}" for gap in report.gaps), warn=True)


COMMAND = Command(summary="Every estimator in the run vs failure (AUROC, AUARC, AURC, PRR, Spearman, CIs, p vs avg "
                          "NLL) → estimator_table.csv.",
                  options=("failure_threshold", "n_boot", "seed", "names", "combined_input_names", "blackbox",
                           "embedder"),
                  flags={"names": "--estimator", "combined_input_names": "--combine-input"}, kinds={"blackbox": bool},
                  help={"names": "only these estimators (repeat the option)",
                        "combined_input_names": "an input of the combined predictor (repeat; default: one estimator "
                                                "per kind of signal)"},
                  set={"progress": True}, plugins=True, show=show)

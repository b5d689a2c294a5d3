"""``agentuq-nb train-detector RUN_OR_RESULTS ... --out DETECTOR_DIR``: a failure detector learned from labelled runs,
judged by every protocol against length and the task prior, saved as a detector folder.

The command reads its configuration once into plain settings (:meth:`TrainDetectorConfig.training`,
:class:`~agentuq_nb.evaluation.detector_training.TrainingSettings`) and each input once
(:func:`~agentuq_nb.evaluation.detector_inputs.resolve_sources`: its results, layout, domain, tasks and content hash),
extracts the features of every trajectory once, and hands them down: the training - protocols, the final and
leave-one-run-out models, calibration, early detection, the card - is the library's
(:mod:`agentuq_nb.evaluation.detector_training`, whose docstring says each part), and the folder
is written beside the card's text (:func:`~agentuq_nb.figures.detector_card.write_detector_folder`,
:mod:`agentuq_nb.io.store.detector_dir`).

Memory grows linearly with the labelled trajectories (the feature table and the fits, two folds at once; extraction
holds one batch): under 0.5 GB + 0.065 MB per trajectory with the default groups - measured with the selection
workers (the process tree's summed PSS) 1.07 GB at 10⁴ tiny trajectories and 6.83 GB at 10⁵ (:data:`MEMORY_NOTE`, in
the command's help; benchmarks/bench_train_memory.py, benchmarks/RESULTS.md).
"""
from __future__ import annotations

import os
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal, Optional

import pandas as pd
from pydantic import Field, field_validator

from agentuq_nb.evaluation.defaults import DETECTOR_MAX_TERMS, DETECTOR_MIN_DF, DETECTOR_MIN_TASKS
from agentuq_nb.evaluation.defaults import DETECTOR_PROTOCOLS as PROTOCOLS
from agentuq_nb.evaluation.detector_inputs import BATCH_SIZE, resolve_sources
from agentuq_nb.evaluation.detector_training import (
    EARLY_PROTOCOL,
    TrainedDetector,
    TrainingSettings,
    prefix_reader,
    train_on_features,
)
from agentuq_nb.figures.detector_card import write_detector_folder
from agentuq_nb.io.store.detector_dir import check_destination
from agentuq_nb.steps.base import (
    RESULTS_HELP,
    SCHEDULER_HELP,
    Command,
    FailureThresholdField,
    NBootField,
    Reporter,
    SeedField,
    Step,
    StepConfig,
    interval_text,
    num_text,
)
from agentuq_nb.uq.detector_features import EMBED_MAX_TOKENS_RANGE, GROUPS, needs_embeddings

if TYPE_CHECKING:  # the statistics are imported when the step runs: the command line starts without them
    from agentuq_nb.evaluation.detector_protocols import Fold

STEP = Step("train-detector", "agentuq-nb train-detector RUN_OR_RESULTS ... --out DETECTOR_DIR", run_folder=False)

class TrainDetectorConfig(StepConfig):
    """The labelled runs, where the detector goes, what it is made of and how it is judged."""

    inputs: list[Path] = Field(min_length=1, description="labelled runs: results (any layout the readers take) or "
                               "run folders")
    out: Path = Field(description="the detector folder to write (new, or a detector folder to replace)")
    groups: list[str] = Field(list(GROUPS), description="feature groups: text, blackbox (structure + TRACER), "
                              "embeddings, length; monitors (the run folders' imported scores and judges) when asked")
    model: Literal["logistic", "gbm"] = Field("logistic", description="logistic regression (L2) or gradient boosting")
    protocols: list[str] = Field(list(PROTOCOLS), description="protocols reported (leave_one_run_out is always "
                                 "computed: it calibrates the probabilities)")
    failure_threshold: FailureThresholdField
    n_splits: int = Field(5, ge=2, le=20, description="folds by task (within-run and run-and-task-out protocols)")
    n_boot: NBootField = Field(description="bootstrap resamples (tasks within runs)")
    seed: SeedField = Field(description="seed of the folds and the bootstrap")
    embedder: Literal["minilm", "minilm-static", "hash", "none"] = Field(
        "minilm-static", description="sentence embeddings (minilm-static, the default: MiniLM distilled into a static "
        "table, as the black-box signals embed by default, ~100× faster on texts never embedded before and no worse "
        "on the shared runs' protocols (benchmarks/RESULTS.md); minilm: the transformer itself; hash: a bag-of-words "
        "hash, for tests; none: no embeddings group and no TRACER)")
    embed_max_tokens: int = Field(128, ge=EMBED_MAX_TOKENS_RANGE[0], le=EMBED_MAX_TOKENS_RANGE[1],
                                  description="word pieces MiniLM reads of each text")
    max_terms: int = Field(DETECTOR_MAX_TERMS, ge=1, le=200_000, description="text terms a model keeps (the most frequent)")
    min_df: int = Field(DETECTOR_MIN_DF, ge=1, description="a term is kept when at least this many training "
                        "trajectories hold it")
    min_tasks: int = Field(DETECTOR_MIN_TASKS, ge=1, description="a term is kept only when trajectories of at "
                           "least this many tasks hold it (a term of one task - its user's name - names the task)")
    early_turns: list[int] = Field(default_factory=list, description="early detection: the first k agent turns")
    early_fractions: list[float] = Field(default_factory=list, description="early detection: fractions of the "
                                         "messages")
    early_protocol: str = Field(EARLY_PROTOCOL, description="the protocol whose fold models read the prefixes")
    scheduler: Optional[str] = Field(None, description="feature extraction on Dask: a scheduler address or local:N")
    batch_size: int = Field(BATCH_SIZE, ge=1, le=100_000, description="simulations per feature-extraction job")
    threads: int = Field(2, ge=1, le=32, description="model selections (the protocols' folds, the final model) fitted "
                         "at once, in worker processes (1: one after the other in this process; each on one BLAS "
                         "thread; the same numbers for any count)")
    progress: bool = Field(False, description="show progress bars")
    force: bool = Field(False, description="replace a detector folder's files that another writer made (a card.json "
                        "that is not a detector's)")

    @field_validator("groups")
    @classmethod
    def _known_groups(cls, value):
        from agentuq_nb.uq.detector_features import check_groups

        return list(check_groups(value))

    @field_validator("protocols")
    @classmethod
    def _known_protocols(cls, value):
        unknown = [p for p in value if p not in PROTOCOLS]
        if unknown or not value:
            raise ValueError(f"protocols must be among {', '.join(PROTOCOLS)} (at least one), not {value}")
        return list(dict.fromkeys(value))

    @field_validator("early_protocol")
    @classmethod
    def _known_early_protocol(cls, value):
        if value not in PROTOCOLS:
            raise ValueError(f"early_protocol must be one of {', '.join(PROTOCOLS)}, not {value!r}")
        return value

    @field_validator("early_turns")
    @classmethod
    def _positive_turns(cls, value):
        if any(k < 1 for k in value):
            raise ValueError(f"early turns must be >= 1, not {value}")
        return sorted(set(value))

    @field_validator("early_fractions")
    @classmethod
    def _fractions(cls, value):
        if any(not 0 < f <= 1 for f in value):
            raise ValueError(f"early fractions must lie in (0, 1], not {value}")
        return sorted(set(value))

    def training(self) -> TrainingSettings:
        """This configuration resolved once into what the training reads (plain values; the embedder ``none`` where
        no group embeds)."""
        from agentuq_nb.evaluation.detector_model import DetectorSettings

        return TrainingSettings(
            detector=DetectorSettings(groups=tuple(self.groups), model=self.model, max_terms=self.max_terms,
                                      min_df=self.min_df, min_tasks=self.min_tasks, seed=self.seed),
            groups=tuple(self.groups), embedder=self.embedder if needs_embeddings(self.groups) else "none",
            embed_max_tokens=self.embed_max_tokens, protocols=tuple(self.protocols),
            failure_threshold=float(self.failure_threshold), n_splits=self.n_splits, n_boot=self.n_boot,
            seed=self.seed, early_turns=tuple(self.early_turns), early_fractions=tuple(self.early_fractions),
            early_protocol=self.early_protocol, threads=self.threads, scheduler=self.scheduler,
            batch_size=self.batch_size, progress=self.progress, command=STEP.name)

    def model_post_init(self, context: Any) -> None:
        if self.embedder == "none" and "embeddings" in self.groups:
            raise ValueError("the embeddings group needs an embedder (minilm or hash), not 'none'")


# --------------------------------------------------------------------------- the step
def run(config: TrainDetectorConfig, on_fit: Callable[[str, Fold, pd.DataFrame], None] | None = None
        ) -> TrainedDetector:
    """``train-detector`` (see the module docstring); ``on_fit``: told each fold's training rows (tests)."""
    check_destination(config.out, config.inputs, config.force)
    start = time.perf_counter()
    settings = config.training()  # the configuration resolved once
    sources = resolve_sources(config.inputs)  # each input read once
    inputs = [*config.inputs, *(s.results for s in sources)]
    check_destination(config.out, inputs, config.force)  # a run folder's results too
    features = settings.features(sources)
    trained = train_on_features(features, sources, settings, on_fit, prefix_reader(sources, settings),
                                {"features": time.perf_counter() - start})
    return write_detector_folder(trained, config.out, inputs, config.force)


def show(trained: TrainedDetector, run_dir: None, config: TrainDetectorConfig, say: Reporter) -> None:
    """What train-detector prints: what it learned from, each protocol against length and the task prior, where."""
    card = trained.card
    say.say(f"{card['n']} labelled trajectories ({card['n_failures']} failures) of {card['n_runs']} run(s), "
            f"{', '.join(card['domains'])}; features {', '.join(card['feature_groups'])}; "
            f"{card['settings']['model']}; {card['seconds']['total']:.1f} s")
    rows = []
    for name, row in card["protocols"].items():
        if "auroc" not in row:
            rows.append({"protocol": name, "auroc": "—", "vs length": row.get("note", "—"), "vs task prior": "—"})
            continue
        def difference(key: str) -> str:  # a difference and its interval (None: not computed, e.g. --n-boot 0)
            value, lo, hi = (row.get(key + end) for end in ("", "_lo", "_hi"))
            shown = "n/a" if value is None else f"{value:+.3f}"
            return f"{shown} [{lo:+.3f}, {hi:+.3f}]" if lo is not None and hi is not None else shown

        prior = (f"{row['vs_prior']} ({difference('diff_vs_prior')})" if "vs_prior" in row else "no recurring task")
        rows.append({"protocol": name, "auroc": f"{num_text(row['auroc'])} "
                                                f"{interval_text(row.get('auroc_lo'), row.get('auroc_hi'))}",
                     "vs length": f"{row.get('vs_length')} {row.get('length_baseline')} "
                                  f"({difference('diff_vs_length')})",
                     "vs task prior": prior, "ECE": num_text(row.get("calibration_ece"))})
    say.say("pooled within-run AUROC of the held-out scores (tasks resampled within runs); 'beats' = the paired "
            "interval of the difference excludes 0:")
    say.say(pd.DataFrame(rows).to_string(index=False))
    say.say(f"→ {trained.path} (probabilities calibrated on {card['calibration']['probabilities']})")
    shift = (card["calibration"].get("label_shift") or {}).get("summary") or {}
    if shift.get("n_runs"):
        kappa = card["calibration"]["label_shift"].get("prior_strength")
        say.say(f"each run held out: Brier ≤ its base rate's on {shift['runs_brier_adapted_le_base_rate']} of "
                f"{shift['n_runs']} runs, its failure rate estimated with MAE {shift['rate_mae']:.3f} ("
                + ("the training rate, moved by the training runs of the run's agent model where there are any"
                   f" ({shift.get('runs_agent_informed', 0)} of {shift['n_runs']} runs; alone: MAE "
                   f"{shift.get('rate_mae_training_rate', float('nan')):.3f}): the scores did not tell a run's rate "
                   "better; each run's probabilities centred on it" if kappa is None
                   else f"label-shift EM, {kappa:g} pseudo-trajectories at the training rate")
                + f"; mean Brier {shift['mean_brier_adapted']:.3f} against the constant training rate's "
                f"{shift.get('mean_brier_training_rate', float('nan')):.3f} and the true base rate's "
                f"{shift['mean_brier_base_rate']:.3f}); {trained.path / 'card.md'}")
    for note in card.get("notes", []):
        say.say(f"note: {note}", warn=True)


#: the memory bound the command's help states (measured: benchmarks/RESULTS.md, issue 51 point 6)
MEMORY_NOTE = ("memory: under 0.5 GB + 0.065 MB per labelled trajectory with the default groups (measured with its "
               "selection workers, summed PSS: 1.07 GB at 10^4, 6.83 GB at 10^5); fewer groups take less")

COMMAND = Command(summary="A failure detector learned from labelled runs, judged by every protocol against length and "
                          "the task prior → DETECTOR_DIR (card.json, model.json, arrays.npz, protocols.csv …; never "
                          "pickle).", arguments=("inputs",),
                  options=("out", "groups", "model", "protocols", "failure_threshold", "n_splits", "n_boot", "seed",
                           "embedder", "max_terms", "min_tasks", "early_turns", "early_fractions", "scheduler", "force"),
                  flags={"groups": "--group", "protocols": "--protocol", "early_turns": "--early-turn",
                         "early_fractions": "--early-fraction"},
                  help={"inputs": "labelled runs: " + RESULTS_HELP + ", or run folders",
                        "groups": "a feature group: text, blackbox, embeddings, length, policy (policy-grounded events: "
                                  "a write without the user's confirmation, a failed call repeated, …), monitors (the "
                                  "run folders' imported scores and judges); policy and monitors are never defaults "
                                  "(repeat; default: the first four; " + MEMORY_NOTE + ")",
                        "model": "logistic | gbm",
                        "protocols": "a protocol reported: within_run, leave_one_run_out, leave_run_and_task_out, "
                                     "leave_one_domain_out (repeat; default: all four)",
                        "early_turns": "early detection: also score the first K agent turns (repeat)",
                        "early_fractions": "early detection: also score the first fraction F of the messages "
                                           "(repeat)",
                        "scheduler": SCHEDULER_HELP + "; feature extraction"},
                  set={"progress": True}, show=show,
                  interrupted="interrupted: nothing was written to {out} (a detector folder is published whole)")


def train_detector(inputs: list[str | os.PathLike], out: str | os.PathLike, **options: Any) -> TrainedDetector:
    """:func:`run` with the :class:`TrainDetectorConfig` fields as keywords."""
    return run(TrainDetectorConfig(inputs=inputs, out=out, **options))



"""Typed configurations (pydantic): a simulation, how jobs run, a scoring pass, a study (params file).

Each validates on construction and names the field that is wrong; a run folder records the
*fingerprint* of the configuration that made it (the model's dump, minus what only selects or
schedules work), and a rerun with another fingerprint is refused rather than mixed in.
"""
from __future__ import annotations

import math
from pathlib import Path
from typing import Any, ClassVar, Literal, Optional

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from agentuq_nb.common.naming import plain_name
from agentuq_nb.common.redaction import redact
from agentuq_nb.records.outcomes import DEFAULT_FAILURE_THRESHOLD

#: the embedded SmolLM2-135M-Instruct, a litellm provider registered by ``agentuq_nb.llm``
EMBEDDED_MODEL = "local/smollm2-135m-instruct"


class _Config(BaseModel):
    model_config = ConfigDict(extra="forbid", validate_assignment=True, arbitrary_types_allowed=True)


class SimulationConfig(_Config):
    """What a simulation run is: the domain, the two LLMs and everything that shapes their messages."""

    domain: str = Field(min_length=1, description="a built-in domain's name (or a custom Domain's)")
    agent_llm: str = EMBEDDED_MODEL
    user_llm: str = EMBEDDED_MODEL
    task_ids: Optional[list[str]] = Field(None, description="these tasks, in this order")
    num_tasks: Optional[int] = Field(None, ge=1, description="else the first N tasks; neither: all")
    num_trials: int = Field(1, ge=1)
    top_logprobs: int = Field(5, ge=0, le=20)
    seed: int = 300
    max_steps: int = Field(10, ge=1)
    max_errors: int = Field(5, ge=1)
    retries: int = Field(3, ge=0, description="LLM call retries on rate limits and transient errors")
    agent_max_tokens: int = Field(64, ge=1)
    user_max_tokens: int = Field(32, ge=1)
    temperature: float = Field(0.0, ge=0.0)
    agent_llm_args: dict[str, Any] = Field(default_factory=dict, description="extra litellm arguments (api_base…)")
    user_llm_args: dict[str, Any] = Field(default_factory=dict)
    scaffold: Literal["auto", "tiny", "tau2"] = "auto"

    #: fields that select or schedule work without changing any simulation's content
    SELECTION: ClassVar[frozenset[str]] = frozenset({"task_ids", "num_tasks", "retries"})

    @field_validator("task_ids", mode="before")
    @classmethod
    def _ids_as_text(cls, value):
        return None if value is None else [str(v) for v in value]

    def style(self, llm: str) -> str:
        """The prompt scaffold of a role played by ``llm``: ``tiny`` for the embedded model under ``auto``."""
        if self.scaffold != "auto":
            return self.scaffold
        return "tiny" if llm == EMBEDDED_MODEL else "tau2"

    def fingerprint(self) -> dict[str, Any]:
        """The content-determining fields as recorded (LLM arguments with secrets removed)."""
        dump = self.model_dump(mode="json", exclude=set(self.SELECTION))
        dump["agent_llm_args"] = redact(dump["agent_llm_args"])
        dump["user_llm_args"] = redact(dump["user_llm_args"])
        return dump


class ExecutionConfig(_Config):
    """How jobs run: in this process (``max_concurrency`` threads) or on a Dask cluster; never what they compute."""

    max_concurrency: int = Field(1, ge=1, description="jobs in flight in this process (threads)")
    scheduler: Any = Field(None, description="a Dask scheduler address, 'local:N' or a distributed.Client")
    api_bases: Optional[list[str]] = Field(None, description="OpenAI-compatible servers, one per Dask worker")
    task_retries: int = Field(2, ge=0, description="reruns of a failed job on the cluster")
    progress: bool = True

    def runner_options(self) -> dict[str, Any]:
        """The job executor's settings (``distributed.JobRunner``)."""
        return {"threads": self.max_concurrency, "scheduler": self.scheduler, "api_bases": self.api_bases,
                "retries": self.task_retries, "progress": self.progress}


TURN_SELECTIONS = ("all", "tool")


class ActionSamplingConfig(_Config):
    """Resampling the agent's next action at its decision points (``uq.action_sampling``)."""

    k: int = Field(5, description="samples per decision point (at least 2)")
    model: Optional[str] = Field(None, description="the sampler: None = the agent's own model; another is an observer")
    temperature: float = Field(1.0, gt=0.0, description="sampling temperature (0 would make K equal samples)")
    turns: str = Field("all", description="all | tool (decision points where the agent called a tool) | first:N")
    limit: Optional[int] = Field(None, ge=1, description="sample only the first N simulations")
    max_tokens: Optional[int] = Field(None, ge=1, description="per sample; None = the agent's recorded max_tokens, else 128")
    top_logprobs: int = Field(5, ge=0, le=20)
    seed: int = 0
    tools: Optional[str] = Field(None, description="a JSON file of the agent's tool schemas, where the results "
                                                   "file does not record them")
    conceptual_partials: bool = Field(True, description="embed the partial responses (conceptual uncertainty's "
                                                        "costly half); off: conceptual is NaN, its pairwise half kept")

    @field_validator("k")
    @classmethod
    def _at_least_two(cls, value):
        if value < 2:
            raise ValueError(f"K must be at least 2 (got {value}): agreement and spread need two samples or more")
        return value

    @field_validator("turns")
    @classmethod
    def _turn_selection(cls, value):
        if value in TURN_SELECTIONS:
            return value
        head, _, n = str(value).partition(":")
        if head == "first" and n.isdigit() and int(n) >= 1:
            return value
        raise ValueError(f"turns must be 'all', 'tool' or 'first:N' with N >= 1, got {value!r}")

    def selects(self, decision_idx: int, is_tool_call: bool) -> bool:
        """Whether the decision point with this index (and taken action) is sampled."""
        if self.turns == "tool":
            return is_tool_call
        if self.turns.startswith("first:"):
            return decision_idx < int(self.turns.split(":")[1])
        return True

    def fingerprint(self) -> dict[str, Any]:
        """What shapes the samples (``limit`` selects trajectories; ``conceptual_partials`` only what is computed
        from them; ``tools`` names a file, whose content the sampler fingerprints: a path says nothing of it)."""
        return self.model_dump(mode="json", exclude={"limit", "conceptual_partials", "tools"})


POLICIES = ("observe", "defer", "resample_vote", "confirm", "random")
POLICY_ACTIONS = ("defer", "resample_vote", "confirm")


class PolicyConfig(_Config):
    """Acting on the agent's uncertainty inside the loop (``agentuq_nb.intervention``, ``sim.decisions``).

    ``policy`` says what is done when the trigger fires at a decision point: ``observe`` never acts (it
    records the online signal at every decision point: the baseline and calibration run), ``defer``
    hands the task to a human, ``resample_vote`` executes the majority of ``k`` resampled actions,
    ``confirm`` asks the user before a write tool call, ``random`` does ``random_action`` with
    probability ``rate`` at each decision point (the baseline at equal intervention rate). The trigger
    of the other three: ``signal > threshold``, the threshold given, or certified from the earlier run
    ``calibration`` by Learn-then-Test so that the failure rate of unflagged runs is <= ``risk`` with
    probability >= 1 - ``alpha``; or ``oracle``: every decision point of the runs that failed in the
    earlier run ``oracle`` (same tasks, trials and seeds).
    """

    policy: Literal["observe", "defer", "resample_vote", "confirm", "random"] = "observe"
    signal: str = Field("turn_avg_nll", min_length=1, description="the online signal (higher = more uncertain)")
    threshold: Optional[float] = Field(None, description="intervene where the signal exceeds it")
    calibration: Optional[str] = Field(None, description="an earlier run folder (observe policy, same signal): "
                                                         "certifies the threshold, fits calibrated signals")
    risk: Optional[float] = Field(None, gt=0.0, lt=1.0, description="δ: the failure rate allowed among unflagged runs")
    alpha: float = Field(0.1, gt=0.0, lt=1.0, description="the certificate fails with probability at most alpha")
    oracle: Optional[str] = Field(None, description="an earlier run folder: intervene on the runs that failed in it")
    rate: Optional[float] = Field(None, ge=0.0, le=1.0, description="random: the probability per decision point")
    random_action: Literal["defer", "resample_vote", "confirm"] = "defer"
    k: int = Field(5, ge=2, description="resampled actions (resample_vote, and the action signals)")
    sample_temperature: float = Field(1.0, gt=0.0)
    escalation_cost: float = Field(1.0, ge=0.0, description="the cost of one hand-off to a human, in study units")
    seed: int = 0

    @field_validator("threshold")
    @classmethod
    def _threshold_is_a_number(cls, value):
        if value is not None and math.isnan(value):
            raise ValueError("threshold is NaN: give the signal's value above which the policy intervenes")
        return value

    @property
    def action(self) -> str | None:
        """What an intervention does (None for ``observe``)."""
        return None if self.policy == "observe" else self.random_action if self.policy == "random" else self.policy

    def model_post_init(self, context: Any) -> None:
        if self.policy == "random":
            if self.rate is None:
                raise ValueError("policy 'random' needs rate (the intervention probability per decision point)")
            return
        if self.rate is not None:
            raise ValueError(f"rate is for policy 'random', not {self.policy!r}")
        if self.policy == "observe":
            return
        triggers = [self.threshold is not None, self.risk is not None, self.oracle is not None]
        if sum(triggers) != 1:
            raise ValueError(f"policy {self.policy!r} needs exactly one trigger: threshold, risk (with calibration) "
                             f"or oracle")
        if self.risk is not None and self.calibration is None:
            raise ValueError("risk needs calibration: the earlier run the threshold is certified on")


class InterventionStudyConfig(_Config):
    """The intervention study (``intervention.run_study``, notebook 12): a calibration run and a held-out
    baseline run under the ``observe`` policy, then each of ``policies`` at the thresholds that flag
    ``rates`` of the calibration run's trajectories, ``random`` at the same rates, ``defer`` at the threshold
    certified for ``risk``, and the oracle. Held-out runs share their seed: they differ only by the policy."""

    domain: str = "bookshop"
    task_ids: Optional[list[str]] = None
    num_tasks: Optional[int] = Field(None, ge=1)
    num_trials: int = Field(1, ge=1)
    seed: int = Field(300, description="the held-out runs (baseline and every policy)")
    calibration_seed: int = Field(301, description="the calibration run: the same tasks, other trial seeds")
    temperature: float = Field(0.5, ge=0.0)
    signal: str = "turn_avg_nll"
    policies: list[Literal["defer", "resample_vote", "confirm"]] = Field(
        default_factory=lambda: ["defer", "resample_vote", "confirm"])
    rates: list[float] = Field(default_factory=lambda: [0.25, 0.5],
                               description="target shares of trajectories flagged (thresholds from the calibration run)")
    risk: float = Field(0.7, gt=0.0, lt=1.0, description="δ for the certified defer threshold")
    alpha: float = Field(0.1, gt=0.0, lt=1.0)
    k: int = Field(4, ge=2)
    escalation_cost: float = Field(1.0, ge=0.0)
    oracle: bool = Field(True, description="also run resample_vote and confirm on exactly the baseline's failures")
    n_boot: int = Field(1000, ge=100)

    @field_validator("task_ids", mode="before")
    @classmethod
    def _ids_as_text(cls, value):
        return None if value is None else [str(v) for v in value]

    @field_validator("rates")
    @classmethod
    def _rates_in_unit_interval(cls, value):
        if not value or any(not 0.0 < r < 1.0 for r in value):
            raise ValueError(f"rates must be shares strictly between 0 and 1, got {value}")
        return sorted(value)


BACKEND_SOURCES = {"teacher_forced": "teacher_forced", "echo": "teacher_forced", "chat_replay": "chat_replay"}


class ScoringConfig(_Config):
    """A teacher-forced (or replayed) scoring pass over recorded trajectories."""

    scorer_mode: Literal["agent_llm", "auxiliary_llm"] = "agent_llm"
    scorer_llm: str = EMBEDDED_MODEL
    backend: Literal["teacher_forced", "echo", "chat_replay"] = "teacher_forced"
    user_messages: bool = True
    tool_messages: bool = True
    top_logprobs: int = Field(5, ge=0, le=20)
    limit: Optional[int] = Field(None, ge=1, description="score only the first N simulations")

    @field_validator("scorer_llm", mode="before")
    @classmethod
    def _default_model(cls, value):
        return EMBEDDED_MODEL if value is None else value

    @property
    def source(self) -> str:
        """The ``source`` of the rows it writes: ``teacher_forced`` (also for ``echo``) or ``chat_replay``."""
        return BACKEND_SOURCES[self.backend]

    def observation_roles(self) -> set[str]:
        roles = {r for r, keep in (("user", self.user_messages), ("tool", self.tool_messages)) if keep}
        if not roles:
            raise ValueError("nothing to score: both user and tool messages were excluded")
        return roles

    def observation_table_suffix(self) -> str:
        return f"{self.scorer_mode}_replay" if self.source == "chat_replay" else self.scorer_mode


class BlackBoxConfig(BaseModel):
    """What the black-box step (``evaluation.run_blackbox``) computes with; the tuned readouts depend on the
    first three."""

    model_config = ConfigDict(extra="forbid")

    failure_threshold: float = Field(DEFAULT_FAILURE_THRESHOLD, description="failure = reward < threshold")
    seed: int = Field(0, description="seed of the folds of TRACER's nested tuning")
    n_splits: int = Field(5, ge=2, description="folds (by task) of TRACER's nested tuning")
    embedder: Literal["minilm", "hash", "none"] = Field(
        "minilm", description="sentence embeddings (hash: a bag-of-words hash, for tests; none: the signals that need "
        "none, as where the [embeddings] extra is not installed)")
    embed_max_tokens: int = Field(128, ge=8, le=512, description="word pieces MiniLM reads of each text: 128, the "
                                  "length it was trained on (its cost grows with each piece)")
    results: Optional[Path] = Field(None, description="the results to read messages from (default: the run's own)")


class NotebookEntry(_Config):
    name: str = Field(min_length=1, description="a notebook of the project's notebooks/ folder, by file name")
    parameters: dict[str, Any] = Field(default_factory=dict)

    @field_validator("name")
    @classmethod
    def _in_notebooks_folder(cls, value):
        return plain_name(value, "notebook")


class StudySpec(_Config):
    """A params file: ``name``, ``parameters`` for every notebook, the ``notebooks`` in order, an optional ``grid``."""

    name: Optional[str] = None
    parameters: dict[str, Any] = Field(default_factory=dict)
    notebooks: list[NotebookEntry] = Field(min_length=1)
    grid: Optional[dict[str, list[Any]]] = None

    @field_validator("name")
    @classmethod
    def _inside_runs_and_figures(cls, value):
        return value if value is None else plain_name(value, "study name")

    @field_validator("parameters", mode="before")
    @classmethod
    def _no_parameters(cls, value):
        return {} if value is None else value

    @field_validator("notebooks", mode="before")
    @classmethod
    def _names_as_entries(cls, value):
        if not isinstance(value, list):
            return value
        return [{"name": v} if isinstance(v, str) else
                ({**v, "parameters": v.get("parameters") or {}} if isinstance(v, dict) else v) for v in value]

    @field_validator("grid")
    @classmethod
    def _grid_lists_not_empty(cls, grid):
        if grid is not None:
            if not grid:
                raise ValueError("'grid' must map parameter names to non-empty lists of values")
            for key, values in grid.items():
                if not values:
                    raise ValueError(f"grid values of '{key}' must be a non-empty list")
        return grid


def configs_from_options(options: dict[str, Any], config_type: type[BaseModel], label: str,
                         **fixed: Any) -> tuple[Any, ExecutionConfig]:
    """Keyword options of a call → (``config_type``, :class:`ExecutionConfig`): an unknown name is a
    TypeError, a wrong value a ValueError naming the ``label`` option."""
    fields, execution_fields = set(config_type.model_fields), set(ExecutionConfig.model_fields)
    unknown = sorted(set(options) - fields - execution_fields)
    if unknown:
        raise TypeError(f"unknown {label} option(s) {unknown}; known: {sorted(fields - set(fixed) | execution_fields)}")
    try:
        return (config_type(**fixed, **{k: v for k, v in options.items() if k in fields}),
                ExecutionConfig(**{k: v for k, v in options.items() if k in execution_fields}))
    except ValidationError as err:
        what, where = validation_message(err)
        raise ValueError(f"{label} option '{where}': {what}") from None


def validation_message(err: ValidationError) -> tuple[str, str]:
    """``(what, where)`` of a pydantic error's first problem, for an error naming the field."""
    first = err.errors()[0]
    where = "".join(f"[{p}]" if isinstance(p, int) else (f".{p}" if i else str(p)) for i, p in enumerate(first["loc"]))
    return first["msg"].removeprefix("Value error, "), where or "(top level)"

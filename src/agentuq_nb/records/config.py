"""Typed configurations (pydantic) the lower layers share: a simulation, how jobs run, a scoring pass, action sampling.

A step's own options live with the step (``agentuq_nb.steps``), a policy's with the policies
(``agentuq_nb.intervention.config``), a params file's with the studies (``agentuq_nb.pipeline.spec``).

Each validates on construction and names the field that is wrong; a run folder records the
*fingerprint* of the configuration that made it (the model's dump, minus what only selects or
schedules work), and a rerun with another fingerprint is refused rather than mixed in.
"""
from __future__ import annotations

from typing import Annotated, Any, ClassVar, Literal, Optional, get_args

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from agentuq_nb.common.limits import MAX_GRID_OPTION, MAX_LIMIT, MAX_N_BOOT, MAX_SAMPLES, MAX_SEED
from agentuq_nb.common.redaction import redact

#: a random seed (the bounds numpy's and scikit-learn's generators take); the command line's ``--seed`` gets them
Seed = Annotated[int, Field(ge=0, le=MAX_SEED)]
#: bootstrap resamples (0: no intervals), bounded so that memory and time stay bounded (``--n-boot``)
NBoot = Annotated[int, Field(ge=0, le=MAX_N_BOOT)]
#: a count of bins (calibration, ECE)
NBins = Annotated[int, Field(ge=1, le=MAX_GRID_OPTION)]

#: the embedded SmolLM2-135M-Instruct, a litellm provider registered by ``agentuq_nb.llm``
EMBEDDED_MODEL = "local/smollm2-135m-instruct"


class Config(BaseModel):
    """A configuration: unknown names refused, each field validated on construction and assignment."""

    model_config = ConfigDict(extra="forbid", validate_assignment=True, arbitrary_types_allowed=True)


class SimulationConfig(Config):
    """What a simulation run is: the domain, the two LLMs and everything that shapes their messages."""

    domain: str = Field(min_length=1, description="a built-in domain's name (or a custom Domain's)")
    agent_llm: str = Field(EMBEDDED_MODEL, description="litellm model name")
    user_llm: str = Field(EMBEDDED_MODEL, description="litellm model name")
    task_ids: Optional[list[str]] = Field(None, description="these tasks, in this order")
    num_tasks: Optional[int] = Field(None, ge=1, description="else the first N tasks; neither: all")
    num_trials: int = Field(1, ge=1, description="trials per task (each its own seed, drawn from seed)")
    top_logprobs: int = Field(5, ge=0, le=20, description="alternatives kept per generated token")
    seed: int = Field(300, description="seed of the trials: each LLM call samples with one drawn from it, the task "
                      "and the message index")
    max_steps: int = Field(10, ge=1, description="turns (agent, user or tools) a simulation may take before it is stopped")
    max_errors: int = Field(5, ge=1, description="tool errors and malformed tool calls a simulation may make before it is stopped")
    retries: int = Field(3, ge=0, description="LLM call retries on rate limits and transient errors")
    agent_max_tokens: int = Field(64, ge=1)
    user_max_tokens: int = Field(32, ge=1)
    temperature: float = Field(0.0, ge=0.0, description="sampling temperature of both LLMs")
    agent_llm_args: dict[str, Any] = Field(default_factory=dict, description="extra litellm arguments (api_base…)")
    user_llm_args: dict[str, Any] = Field(default_factory=dict)
    scaffold: Literal["auto", "tiny", "tau2"] = "auto"

    #: fields that select or schedule work without changing any simulation's content
    SELECTION: ClassVar[frozenset[str]] = frozenset({"task_ids", "num_tasks", "retries"})

    @field_validator("task_ids", mode="before")
    @classmethod
    def _ids_as_text(cls, value):
        """Ids as text; one given as ``"1,2"`` is two (``--task-ids 1,2``)."""
        return None if value is None else [t.strip() for v in value for t in str(v).split(",") if t.strip()] or None

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


class ExecutionConfig(Config):
    """How jobs run: in this process (``max_concurrency`` threads) or on a Dask cluster; never what they compute."""

    max_concurrency: int = Field(1, ge=1, description="jobs in flight in this process (threads)")
    scheduler: Any = Field(None, description="run on Dask: a scheduler address (tcp://host:8786) or local:N for N "
                           "local worker processes (or a distributed.Client)")
    api_bases: Optional[list[str]] = Field(None, description="OpenAI-compatible server for remote models, one per "
                                           "worker with a scheduler (repeat the option)")
    task_retries: int = Field(2, ge=0, description="reruns of a failed job on the cluster")
    progress: bool = True

    def runner_options(self) -> dict[str, Any]:
        """The job executor's settings (``distributed.JobRunner``)."""
        return {"threads": self.max_concurrency, "scheduler": self.scheduler, "api_bases": self.api_bases,
                "retries": self.task_retries, "progress": self.progress}


TURN_SELECTIONS = ("all", "tool")


class ActionSamplingConfig(Config):
    """Resampling the agent's next action at its decision points (``uq.action_sampling``)."""

    k: int = Field(5, le=MAX_SAMPLES, description="samples per decision point (at least 2)")
    model: Optional[str] = Field(None, description="the sampler: None = the agent's own model; another is an observer")
    temperature: float = Field(1.0, gt=0.0, description="sampling temperature (0 would make K equal samples)")
    turns: str = Field("all", description="all | tool (decision points where the agent called a tool) | first:N")
    limit: Optional[int] = Field(None, ge=1, le=MAX_LIMIT, description="sample only the first N simulations")
    max_tokens: Optional[int] = Field(None, ge=1, description="per sample; None = the agent's recorded max_tokens, else 128")
    top_logprobs: int = Field(5, ge=0, le=20, description="alternatives kept per sampled token")
    seed: int = Field(0, description="seed of the samples (each decision point's drawn from it)")
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


BACKEND_SOURCES = {"teacher_forced": "teacher_forced", "echo": "teacher_forced", "chat_replay": "chat_replay"}


class ScoringConfig(Config):
    """A teacher-forced (or replayed) scoring pass over recorded trajectories."""

    scorer_mode: Literal["agent_llm", "auxiliary_llm"] = Field("agent_llm", description="agent_llm | auxiliary_llm")
    scorer_llm: str = Field(EMBEDDED_MODEL, description="litellm model name")
    backend: Literal["teacher_forced", "echo", "chat_replay"] = Field(
        "teacher_forced", description="teacher_forced | echo | chat_replay")
    user_messages: bool = Field(True, description="score the user's messages")
    tool_messages: bool = Field(True, description="score the tools' messages")
    top_logprobs: int = Field(5, ge=0, le=20)
    limit: Optional[int] = Field(None, ge=1, le=MAX_LIMIT, description="score only the first N simulations")

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


def field_at(config: type[BaseModel], path: str) -> Any:
    """The pydantic field at a dotted ``path`` of ``config`` (through nested configs)."""
    head, _, rest = path.partition(".")
    info = config.model_fields[head]
    if not rest:
        return info
    return field_at(next(a for a in (info.annotation, *get_args(info.annotation)) if isinstance(a, type)
                         and issubclass(a, BaseModel)), rest)



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

"""Resample the agent's next action at every decision point of recorded trajectories.

A *decision point* is an agent message the agent's model generated: every assistant message except
one that opens the conversation (the harness's scripted greeting, "Hi! How can I help you today?",
decided by nobody). At each, the agent's context is rebuilt as its model saw it — the system prompt
with the policy (as recorded by our simulator, else τ²-bench's with the file's policy), the history
before the message as the agent sees it (``sim.agent.agent_visible``), the tools — and K alternative
next messages are drawn from a sampler with ``llm.sample`` (for the embedded model: the K samples
decoded together over the shared, cached prompt).

The sampler is the agent's own model by default (``sampler_kind = "self"``); any other model is an
*observer* (``"observer"``), and every row says which. Where the results file does not record the
tools (τ²-bench writes ``tool_defs`` as null), they come from ``--tools FILE`` or, failing that, are
inferred from the calls the file records (names, argument names and JSON types; no descriptions):
the report says which (``tools_source``).

Context window: for the embedded model the scorer's policy applies (``llm.context_fit``: the oldest
middle turns are left out until prompt and ``max_tokens`` fit), counted per decision point; a remote
model's overflow, or a system prompt that alone does not fit, skips the decision point, counted.

One row per sample goes to ``RUN_DIR/action_samples.parquet`` (``records.action_samples``), and the
per-decision-point statistics to ``RUN_DIR/action_turns.parquet`` (``uq.action_uq``), published as
one commit. Resumable per trajectory (a checkpoint each; a rerun with other settings is refused);
jobs run through the common executor (threads or Dask).
"""
from __future__ import annotations

import hashlib
import json
import zlib
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import pyarrow as pa

from agentuq_nb.common.limits import MAX_SMALL_JSON_BYTES
from agentuq_nb.distributed import with_worker_api_base
from agentuq_nb.io.errors import InputError, InputWarnings
from agentuq_nb.io.files import read_limited_json
from agentuq_nb.io.ingest.results import iter_simulations
from agentuq_nb.records import Simulation
from agentuq_nb.records.action_samples import ACTION_SAMPLE_SCHEMA
from agentuq_nb.records.config import EMBEDDED_MODEL, ActionSamplingConfig
from agentuq_nb.records.toolcall_spans import TOOL_CALL_OPEN
from agentuq_nb.sim.agent import agent_visible
from agentuq_nb.uq.observation import conversation

DEFAULT_MAX_TOKENS = 128  # per sample, where the results do not record the agent's max_tokens
JSON_TYPES = {str: "string", bool: "boolean", int: "integer", float: "number", list: "array", dict: "object"}


# --------------------------------------------------------------------------- decision points

@dataclass(frozen=True)
class Decision:
    """One decision point: where it is, and the action the agent took there."""

    decision_idx: int
    message_idx: int
    turn_idx: int
    tool_choice: str | None  # as the agent's request had it ("required" for the tiny scaffold's first turn)
    taken_content: str | None
    taken_tool_calls: str  # JSON text, records.action_samples' form


def calls_json(tool_calls: Iterable[Any] | None) -> str:
    """Tool calls as ``records.action_samples`` stores them: ``[{"name", "arguments"}]`` (arguments an
    object, or the raw string where they did not parse)."""
    out = []
    for call in tool_calls or []:
        call = call if isinstance(call, dict) else call.model_dump()
        out.append({"name": call.get("name"), "arguments": call.get("arguments")})
    return json.dumps(out, ensure_ascii=False, sort_keys=True, default=str)


def decision_points(sim: Simulation, config: ActionSamplingConfig, tiny_scaffold: bool = False) -> list[Decision]:
    """The decision points of ``sim`` that ``config.turns`` selects, in order."""
    out, index = [], 0
    for i, m in enumerate(sim.messages):
        if m.role != "assistant" or i == 0:  # message 0 opens the conversation: the harness's greeting
            continue
        tool_choice = "required" if tiny_scaffold and index == 0 else None
        if config.selects(index, bool(m.tool_calls)):
            out.append(Decision(index, i, m.turn_idx if m.turn_idx is not None else i, tool_choice, m.content,
                                calls_json(m.tool_calls)))
        index += 1
    return out


# --------------------------------------------------------------------------- tools

def recorded_tools(info: dict) -> list[dict] | None:
    """The agent's tools as the results record them (``environment_info.tool_defs``), OpenAI-shaped."""
    defs = (info.get("environment_info") or {}).get("tool_defs")
    if not defs:
        return None
    items = defs.values() if isinstance(defs, dict) else defs
    out = []
    for tool in items:
        tool = tool if isinstance(tool, dict) else {}
        schema = tool.get("openai_schema") or tool  # τ²-bench's Tool dumps carry it under openai_schema
        if "doc" in schema and "name" in schema and "function" not in schema:  # τ²-bench's ToolSignature
            schema = {"type": "function", "function": {"name": schema["name"], "description": schema["doc"],
                                                       "parameters": schema.get("params") or {"type": "object",
                                                                                              "properties": {}}}}
        if "function" not in schema and "name" in schema:
            schema = {"type": "function", "function": schema}
        if "function" in schema:
            out.append(schema)
    return out or None


def infer_tools(sims: Iterable[Simulation]) -> list[dict]:
    """Tool schemas inferred from the calls the simulations record: each tool's argument names with the
    JSON type of their values (an argument is required when every call gave it); no descriptions."""
    types: dict[str, dict[str, set[str]]] = {}  # tool -> argument -> JSON types of its values
    calls: Counter = Counter()  # calls per tool
    given: Counter = Counter()  # calls per (tool, argument)
    for sim in sims:
        for m in sim.messages:
            for call in m.tool_calls or []:
                args = call.arguments if isinstance(call.arguments, dict) else {}
                calls[call.name] += 1
                arguments = types.setdefault(call.name, {})
                for key, value in args.items():
                    given[call.name, key] += 1
                    arguments.setdefault(key, set())
                    if value is not None:
                        arguments[key].add(JSON_TYPES.get(type(value), "string"))
    tools = []
    for name in sorted(types):
        props = {key: ({"type": next(iter(kinds))} if len(kinds) == 1 else {}) for key, kinds in types[name].items()}
        required = sorted(key for key in types[name] if given[name, key] == calls[name])
        tools.append({"type": "function", "function": {
            "name": name, "description": "(inferred from the calls the results record)",
            "parameters": {"type": "object", "properties": props, "required": required}}})
    return tools


def agent_tools(info: dict, results_path: Path, tools_file: str | None, warnings: InputWarnings) -> tuple[list[dict], str]:
    """``(tools, source)``: from ``tools_file``, else as recorded, else inferred (counted as a warning); checked
    in every case (:func:`~agentuq_nb.llm.tool_format.check_tool_schemas`) before anything is sampled."""
    if tools_file:
        path = Path(tools_file)
        tools = read_limited_json(path, MAX_SMALL_JSON_BYTES, "tool schemas file")
        tools = list(tools.values()) if isinstance(tools, dict) else tools
        if not isinstance(tools, list) or not all(isinstance(t, dict) and ("function" in t or "name" in t) for t in tools):
            raise InputError(path, "expected a JSON list of OpenAI tool schemas ({'type': 'function', 'function': {...}})")
        return _checked(tools, path, "tools"), "file"
    tools = recorded_tools(info)
    if tools:
        return _checked(tools, results_path, "info.environment_info.tool_defs"), "recorded"
    tools = infer_tools(iter_simulations(results_path))
    warnings.add("tools_inferred_from_calls", f"{results_path}: environment_info.tool_defs is empty; "
                 f"{len(tools)} tool schema(s) inferred from the recorded calls (tools: give a FILE of the real ones)")
    return _checked(tools, results_path, "the tools inferred from its calls"), "inferred"


def _checked(tools: list[dict], path: Path, where: str) -> list[dict]:
    from agentuq_nb.llm.tool_format import ToolSchemaError, check_tool_schemas  # the llm package loads litellm

    try:
        return check_tool_schemas(tools, where)
    except ToolSchemaError as err:
        raise InputError(path, str(err)) from None


def tools_digest(tools: list[dict]) -> str:
    """SHA-256 of the tool schemas' content (canonical JSON): what a resumed run must have been sampled with."""
    text = json.dumps(tools, sort_keys=True, ensure_ascii=False, separators=(",", ":"), default=str)
    return hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()


# --------------------------------------------------------------------------- sampling one trajectory

@dataclass(frozen=True)
class SamplingJob:
    """One trajectory's decision points to sample, picklable so that a Dask worker can run it."""

    sim: Simulation
    domain: str
    where: str
    system: str
    tools: list[dict]
    decisions: list[Decision]
    model: str
    sampler_kind: str
    config: ActionSamplingConfig
    max_tokens: int
    request: dict[str, Any] = field(default_factory=dict)


@dataclass
class SampledTrajectory:
    table: pa.Table
    without_decisions: int = 0  # 1: the trajectory has no selected decision point
    where: str = ""  # the trajectory, for the warning that says so
    decisions: int = 0
    overflow_decisions: int = 0  # skipped: the context does not fit the sampler's window
    fitted_decisions: int = 0  # sampled after leaving the oldest turns out (context policy)
    dropped_messages: int = 0
    cost: float = 0.0


def decision_seed(config_seed: int, sim: Simulation, decision_idx: int) -> int:
    """The first sample's seed at a decision point (sample i uses it + i): a function of the point alone,
    so that a resumed or distributed run draws the same samples."""
    key = f"{config_seed}|{sim.task_id}|{sim.trial}|{sim.seed}|{decision_idx}"
    return zlib.crc32(key.encode("utf-8")) & 0x3FFFFFFF


def is_malformed_message(message: dict[str, Any]) -> bool:
    """A generated message whose tool call did not parse: arguments that are not an object, or text that
    opens a call the model did not finish."""
    calls = message.get("tool_calls") or []
    return any(not isinstance(c.get("arguments"), dict) for c in calls) or (
        not calls and TOOL_CALL_OPEN in (message.get("content") or ""))


def context_overflow_errors() -> tuple[type[BaseException], ...]:
    """What a sampler raises when a decision point's context does not fit its window (the point is skipped)."""
    import litellm

    from agentuq_nb import llm

    return (llm.ContextWindowError, litellm.ContextWindowExceededError)


def draw_samples(messages: list[dict], k: int, model: str, tools: list[dict] | None, tool_choice: str | None,
                 top_logprobs: int, temperature: float, seed: int, max_tokens: int, request: dict[str, Any]) -> list:
    """K alternative next messages of the agent at one decision point (``llm.sample``; the embedded model
    fits the context by leaving the oldest middle turns out). Used offline here and online by the
    intervention policies, so that both draw alike."""
    from agentuq_nb import llm

    return llm.sample(messages, k=k, model=model, tools=tools or None, tool_choice=tool_choice if tools else None,
                      top_logprobs=top_logprobs, temperature=temperature, seed=seed, max_tokens=max_tokens,
                      **({"fit_context": True} if model == EMBEDDED_MODEL else {}), **request)


def sample_row(generation: Any) -> dict[str, Any]:
    """The sample-specific columns of one ``llm.Generation``."""
    message = generation.message
    calls = message.get("tool_calls") or []
    content = message.get("content")
    malformed = is_malformed_message(message)
    tokens = generation.tokens
    usage = generation.usage or {}
    logprobs = [float(r["chosen_logprob"]) for r in tokens]
    return {
        "content": content, "tool_calls": calls_json(calls), "finish_reason": generation.finish_reason,
        "malformed": bool(malformed), "has_logprobs": bool(tokens),
        "tokens": [r["token"] for r in tokens], "token_logprobs": logprobs,
        "topk_tokens": [list(r.get("topk_tokens") or []) for r in tokens],
        "topk_logprobs": [[float(x) for x in (r.get("topk_logprobs") or [])] for r in tokens],
        "sum_logprob": float(sum(logprobs)) if tokens else float("nan"), "num_tokens": len(tokens),
        "prompt_tokens": int(usage.get("prompt_tokens") or 0),
        "completion_tokens": int(usage.get("completion_tokens") or 0),
        "cost": float("nan") if generation.cost is None else float(generation.cost),
        "context_dropped_messages": int(usage.get("context_dropped_messages") or 0),
    }


def sample_one(job: SamplingJob) -> SampledTrajectory:
    """K samples at each decision point of one trajectory (rows in ``records.action_samples``' schema)."""
    sim, config = job.sim, job.config
    history = [agent_visible(m) for m in conversation(sim)]
    keys = {"domain": job.domain, "task_id": str(sim.task_id), "trial": sim.trial, "seed": sim.seed}
    overflow = context_overflow_errors()
    out = SampledTrajectory(ACTION_SAMPLE_SCHEMA.empty_table(), without_decisions=int(not job.decisions),
                            where=job.where)
    rows: list[dict] = []
    for d in job.decisions:
        base_seed = decision_seed(config.seed, sim, d.decision_idx)
        messages = [{"role": "system", "content": job.system}, *history[:d.message_idx]]
        try:
            samples = draw_samples(messages, config.k, job.model, job.tools, d.tool_choice, config.top_logprobs,
                                   config.temperature, base_seed, job.max_tokens, job.request)
        except overflow:
            out.overflow_decisions += 1
            continue
        out.decisions += 1
        dropped = max(int((s.usage or {}).get("context_dropped_messages") or 0) for s in samples)
        out.fitted_decisions += dropped > 0
        out.dropped_messages += dropped
        for i, generation in enumerate(samples):
            row = sample_row(generation)
            out.cost += 0.0 if row["cost"] != row["cost"] else row["cost"]
            rows.append({**keys, "decision_idx": d.decision_idx, "message_idx": d.message_idx, "turn_idx": d.turn_idx,
                         "sample_idx": i, "sampler_model": job.model, "sampler_kind": job.sampler_kind,
                         "temperature": config.temperature, "sample_seed": base_seed + i,
                         "taken_content": d.taken_content, "taken_tool_calls": d.taken_tool_calls, **row})
    if rows:
        out.table = pa.Table.from_pylist(rows, schema=ACTION_SAMPLE_SCHEMA)
    return out


def sample_on_worker(job: SamplingJob) -> SampledTrajectory:
    """:func:`sample_one` on a Dask worker: a remote sampler uses the worker's ``api_base``, if it has one."""
    if job.model != EMBEDDED_MODEL:
        job = replace(job, request=with_worker_api_base(job.request))
    return sample_one(job)

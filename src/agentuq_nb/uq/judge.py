"""An LLM judge over recorded trajectories: its prompts, the transcript it reads, its verdict as a probability.

* **Prompts.** :data:`PROMPTS` holds the named ones (``outcome``, ``policy``, ``triage``); :func:`load_prompt` takes
  a name or a template file of one's own, validated (:data:`PLACEHOLDERS` are the fields a template may use,
  ``{transcript}`` is required, literal braces are doubled, and it must ask for a ``pass`` or ``fail`` verdict).
  The filled template is the judge's user message, after the system message :data:`JUDGE_SYSTEM`.
* **The transcript** (:func:`transcript_entries`): one numbered entry per message and per tool call
  (``3. Assistant: …``, ``4. Assistant TOOL CALL -> name {args}``, ``5. Tool call_1: …``, ``6. User: …``), an
  entry longer than ``max_entry_chars`` cut to its head and tail around a marker. It is fitted to the judge's
  context by ``llm.context_fit.keep_ends``: all of it if it fits; else the opening entries (up to a third of the
  room) and as many closing entries as fit, one marker line naming how many messages and tokens were left out.
  The room is the judge's context window (or ``context_tokens``) less the rest of the prompt, the answer's
  ``max_tokens`` and a margin (:data:`MARGIN`).
* **The verdict** (:func:`read_verdict`). The judge is told (:data:`JUDGE_SYSTEM`) that its reply starts with
  the verdict. Where the answer carries token log-probs, the *verdict position* is the first of its first
  :data:`VERDICT_WINDOW` tokens whose top-k alternatives hold a verdict word (``pass``/``fail``, any case, or a prefix of one such as ``Pa``; at
  temperature 0 the chosen token is the top alternative, so a verdict written first is found there); the
  probabilities of the pass words and of the fail words among those alternatives are summed, and
  ``p_fail = P(fail words) / (P(pass words) + P(fail words))`` (``probability_source = "logprobs"``;
  ``verdict_mass``: the share of the position's probability the verdict words held, small for a judge that was
  about to write something else). Otherwise the verdict is read from the text (the first verdict word) and
  ``p_fail`` is 1 or 0 (``"verbalized"``); an answer with neither is ``"unparsed"`` (``p_fail`` NaN).
* **Cache key** (:func:`cache_key`): the trajectory's content (:func:`content_digest`), the model, the prompt's
  text and the settings that shape the answer: a changed trajectory, model, prompt or setting is judged anew.
* **Panel** (:func:`panel_scores`): judges (models or prompts) combined per trajectory as UQLM's ``LLMPanel``
  combines its judges' scores (mean, median, min, max), in failure probability: ``max`` of P(fail) is UQLM's
  ``min`` of confidence (the most conservative judge), ``min`` its ``max``.

:func:`judge_one` is one job (one trajectory, one judge) for the common executor (``distributed``).
"""
from __future__ import annotations

import hashlib
import json
import math
import re
import string
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import pandas as pd

from agentuq_nb.distributed import with_worker_api_base
from agentuq_nb.io.errors import InputError
from agentuq_nb.io.files import read_limited_text
from agentuq_nb.records import Simulation
from agentuq_nb.records.config import EMBEDDED_MODEL
from agentuq_nb.records.tokens import TRAJECTORY_KEYS

#: the fields a template may use: what each is filled with
PLACEHOLDERS = {
    "transcript": "the conversation, one numbered entry per message and tool call, fitted to the judge's context",
    "policy": "the agent's policy as the results record it (info.environment_info.policy; empty where absent)",
    "domain": "the run's domain (airline, retail, telecom …)",
    "task_id": "the task's id",
}
#: the most a template file may hold
MAX_TEMPLATE_BYTES = 64 * 1024
#: where a long message is cut (head and tail kept around a marker), before the transcript is fitted
MAX_ENTRY_CHARS = 2000
#: tokens kept free beside the prompt and the answer: the chat format's own tokens, and token counts that are
#: estimates for models whose tokenizer litellm does not have
MARGIN = 64
#: top-k alternatives asked for at each generated token (OpenAI's most)
TOP_LOGPROBS = 20
#: the answer tokens where a verdict is looked for in the log-probs (the verdict comes first, perhaps after markup
#: such as ``**`` or a space); a verdict word later in the answer is read from the text
VERDICT_WINDOW = 4
#: the words a verdict is made of
VERDICTS = ("pass", "fail")
PROBABILITY_SOURCES = ("logprobs", "verbalized", "unparsed")
PANEL_AGGREGATES = {"mean": "the mean P(fail) of the judges (UQLM's avg)",
                    "median": "the median P(fail) of the judges (UQLM's median)",
                    "max": "the highest P(fail) of the judges: the most conservative (UQLM's min of confidence)",
                    "min": "the lowest P(fail) of the judges: the most lenient (UQLM's max of confidence)"}

#: the judge's system message, whatever the prompt: what it reads and that its reply starts with the verdict
JUDGE_SYSTEM = ("You judge conversations between a customer and an AI customer-service agent. Your reply starts "
                "with one word, pass or fail, the verdict.")
_ANSWER = ("Reply with one word first, pass or fail, and then one short sentence that says why.\n"
           "Verdict (pass or fail):")

PROMPT_TEXTS = {
    "outcome": (
        "You are reviewing a conversation between a customer and an AI support agent that can call tools.\n"
        "Did the agent get the customer what they came for? Count it as a failure if the agent took a wrong or "
        "unrequested action, called a tool with wrong arguments, gave wrong information, gave up, or left the "
        "request unresolved.\n\nConversation:\n{transcript}\n\nWas the customer's request handled correctly? "
        + _ANSWER),
    "policy": (
        "You are auditing an AI support agent against the rules it must follow.\n\nThe agent's policy:\n{policy}\n\n"
        "Conversation:\n{transcript}\n\nDid the agent follow every rule of the policy in this conversation (checks "
        "before actions, confirmations, what it may and may not do)? Any violation is a failure. " + _ANSWER),
    "triage": (
        "Quick screen of an agent conversation ({domain} domain).\n\n{transcript}\n\nDoes anything look wrong: "
        "tool errors, the agent repeating itself or giving up, a transfer to a human, a confused or unhappy "
        "customer? If so the verdict is fail, otherwise pass. " + _ANSWER),
}
PROMPT_DESCRIPTIONS = {
    "outcome": "did the agent resolve the customer's request",
    "policy": "did the agent follow its policy (the results' own policy text)",
    "triage": "a short screen for visible trouble",
}


@dataclass(frozen=True)
class JudgePrompt:
    """A judge's prompt: its ``name`` (a built-in's, or the template file's stem), ``text`` (a template) and where
    it came from (``source``: ``built-in`` or the file's path)."""

    name: str
    text: str
    source: str = "built-in"

    @property
    def sha256(self) -> str:
        return hashlib.sha256(self.text.encode()).hexdigest()

    @property
    def fields(self) -> set[str]:
        return {f for _, f, _, _ in string.Formatter().parse(self.text) if f is not None}

    def fill(self, **values: str) -> str:
        return self.text.format(**{k: v for k, v in values.items() if k in self.fields})


PROMPTS = {name: JudgePrompt(name, text) for name, text in PROMPT_TEXTS.items()}
_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_\-]*")


def check_template(text: str, where: str | Path) -> None:
    """Refuse a template that cannot be filled or asks for no verdict (an :class:`InputError` naming ``where``)."""
    try:
        parsed = list(string.Formatter().parse(text))
    except ValueError as err:
        raise InputError(where, f"is not a judge template ({err}; write a literal brace as {{{{ or }}}})") from None
    fields = [(f, spec, conv) for _, f, spec, conv in parsed if f is not None]
    for name, spec, conversion in fields:
        if name not in PLACEHOLDERS:
            shown = f"{{{name}}}" if name else "{}"
            raise InputError(where, f"uses the placeholder {shown}; a judge template may use "
                                    f"{', '.join('{' + p + '}' for p in PLACEHOLDERS)} (a literal brace is written "
                                    "{{ or }})")
        if spec or conversion:
            raise InputError(where, f"formats the placeholder {{{name}}} ('!{conversion or ''}:{spec or ''}'); "
                                    "write it plain")
    if "transcript" not in {f for f, _, _ in fields}:
        raise InputError(where, "has no {transcript} placeholder: the judge would not see the conversation")
    words = set(re.findall(r"[a-z]+", text.lower()))
    if not set(VERDICTS) <= words:
        raise InputError(where, "does not ask for a verdict: a judge template must name both words 'pass' and "
                                "'fail' (the answer's first word is read as the verdict)")


def load_prompt(spec: str | Path) -> JudgePrompt:
    """A named prompt (:data:`PROMPTS`) or a template file of one's own (checked by :func:`check_template`)."""
    spec = str(spec)
    if spec in PROMPTS:
        return PROMPTS[spec]
    path = Path(spec)
    if not path.exists():
        raise InputError(path, f"is neither a judge prompt's name ({', '.join(PROMPTS)}) nor a template file")
    text = read_limited_text(path, MAX_TEMPLATE_BYTES, "judge template")
    check_template(text, path)
    name = path.stem
    if not _NAME.fullmatch(name) or name.startswith("panel"):
        raise InputError(path, "a template file's name is its prompt's name: use letters, digits, '-' and '_' "
                               "(not starting with 'panel')")
    if name in PROMPTS:
        raise InputError(path, f"is named like the built-in prompt '{name}': rename the file")
    return JudgePrompt(name, text, str(path))


# --------------------------------------------------------------------------- the transcript

def clip(text: str, limit: int = MAX_ENTRY_CHARS) -> str:
    """``text`` with its middle replaced by a marker when it is longer than ``limit`` characters."""
    if len(text) <= limit:
        return text
    keep = max(0, limit // 2)
    return f"{text[:keep]} [... {len(text) - 2 * keep} characters left out ...] {text[-keep:]}"


def transcript_entries(sim: Simulation, max_entry_chars: int = MAX_ENTRY_CHARS) -> list[str]:
    """One numbered entry per message and tool call, in order (the module docstring); system messages left out."""
    entries: list[str] = []

    def add(text: str) -> None:
        entries.append(f"{len(entries) + 1}. {clip(text, max_entry_chars)}")

    for m in sim.messages:
        content = m.content if isinstance(m.content, str) else ("" if m.content is None else str(m.content))
        content = " ".join(content.split())
        if m.role == "system":
            continue
        if m.role == "tool":
            add(f"Tool {m.id}: {content}" if m.id else f"Tool: {content}")
            continue
        who = "Assistant" if m.role == "assistant" else "User"
        if content:
            add(f"{who}: {content}")
        for call in m.tool_calls or []:
            add(f"{who} TOOL CALL -> {call.name} {json.dumps(call.arguments, sort_keys=True, default=str)}")
        if not content and not m.tool_calls:
            add(f"{who}: [empty message]")
    return entries


def content_digest(sim: Simulation) -> str:
    """The SHA-256 of a trajectory's content (its messages: roles, text, tool calls and results), not of its
    position in a file: the judge's cache key."""
    messages = [{"role": m.role, "content": m.content, "id": m.id if m.role == "tool" else None,
                 "tool_calls": [[c.name, c.arguments] for c in m.tool_calls or []]} for m in sim.messages]
    text = json.dumps({"task_id": str(sim.task_id), "messages": messages}, sort_keys=True, default=str)
    return hashlib.sha256(text.encode()).hexdigest()


# --------------------------------------------------------------------------- the verdict

def verdict_word(token: str) -> str | None:
    """``pass`` or ``fail`` when a token is a verdict word or a prefix of one (any case, quotes and markup
    stripped), else None."""
    norm = token.strip().lower().strip("*\"'`:.,!()[]{}<>#_-")
    if not norm:
        return None
    for word in VERDICTS:
        if word.startswith(norm) or norm.startswith(word):
            return word
    return None


_VERBAL = re.compile(r"\b(pass|fail)(?:ed|es|s|ing|ure)?\b", re.IGNORECASE)


@dataclass(frozen=True)
class Verdict:
    """A judge's answer read: ``verdict`` (pass | fail | None), ``p_fail`` and ``p_pass`` (summing to 1), where they
    came from (``probability_source``), the verdict token (``token``, ``position``) and ``verdict_mass``."""

    verdict: str | None
    p_fail: float
    probability_source: str
    p_pass: float = float("nan")
    token: str | None = None
    position: int | None = None
    verdict_mass: float | None = None


def read_verdict(tokens: list[dict], text: str) -> Verdict:
    """The verdict of an answer from its token rows (``records.tokens``: ``token``, ``topk_tokens``,
    ``topk_logprobs``): at the first position (of the first :data:`VERDICT_WINDOW`) whose top-k alternatives hold a
    verdict word (at temperature 0 the
    chosen token is the top one, so a verdict word written first is found there), the verdict words' probabilities
    renormalized; the verdict is the chosen token's word where it is one, else the likelier. Without such a position,
    from the ``text``."""
    for position, row in enumerate(tokens[:VERDICT_WINDOW]):
        mass = {word: 0.0 for word in VERDICTS}
        for alternative, logprob in zip(list(row.get("topk_tokens") or []), list(row.get("topk_logprobs") or [])):
            word = verdict_word(str(alternative))
            if word is not None and logprob is not None and math.isfinite(float(logprob)):
                mass[word] += math.exp(float(logprob))
        total = mass["pass"] + mass["fail"]
        if total <= 0:
            continue
        chosen = verdict_word(str(row.get("token") or "")) or ("fail" if mass["fail"] > mass["pass"] else "pass")
        return Verdict(chosen, mass["fail"] / total, "logprobs", mass["pass"] / total, str(row.get("token")),
                       position, min(1.0, total))
    found = _VERBAL.search(text or "")
    if found is None:
        return Verdict(None, float("nan"), "unparsed")
    word = found.group(1).lower()
    return Verdict(word, 1.0 if word == "fail" else 0.0, "verbalized", 0.0 if word == "fail" else 1.0)


# --------------------------------------------------------------------------- one job

@dataclass(frozen=True)
class JudgeSettings:
    """What shapes a judge's answer besides the trajectory and the prompt (all in the cache key)."""

    model: str
    max_tokens: int = 48
    top_logprobs: int = TOP_LOGPROBS
    context_tokens: int | None = None  # the room for the prompt and the answer (None: the model's window)
    max_entry_chars: int = MAX_ENTRY_CHARS

    def as_key(self) -> dict[str, Any]:
        return {"model": self.model, "max_tokens": self.max_tokens, "top_logprobs": self.top_logprobs,
                "context_tokens": self.context_tokens, "max_entry_chars": self.max_entry_chars, "temperature": 0.0}

    @property
    def sha256(self) -> str:
        return hashlib.sha256(json.dumps(self.as_key(), sort_keys=True).encode()).hexdigest()


def cache_key(content_sha256: str, prompt: JudgePrompt, settings: JudgeSettings) -> str:
    """The name of a verdict's cache entry: the trajectory's content, the prompt's text, the model and settings."""
    text = json.dumps({"content": content_sha256, "prompt": prompt.sha256, **settings.as_key()}, sort_keys=True)
    return hashlib.sha256(text.encode()).hexdigest()[:32]


@dataclass(frozen=True)
class JudgeJob:
    """One trajectory for one judge: what :func:`judge_one` needs, small enough to ship to a Dask worker."""

    keys: dict[str, Any]
    simulation_id: str
    content_sha256: str
    entries: list[str]
    prompt: JudgePrompt
    settings: JudgeSettings
    policy: str = ""
    where: str = ""
    request: dict[str, Any] = field(default_factory=dict)  # extra litellm arguments (api_base …)


def judge_messages(job: JudgeJob) -> tuple[list[dict], dict[str, int]]:
    """The judge's messages (:data:`JUDGE_SYSTEM`, then the filled prompt), the transcript fitted to its context,
    and what the fitting did (``transcript_entries``, ``elided_entries``, ``elided_tokens``, ``context_tokens``)."""
    from agentuq_nb import llm
    from agentuq_nb.llm.context_fit import keep_ends

    settings = job.settings
    window = settings.context_tokens or llm.context_window(settings.model)
    values = {"policy": job.policy, "domain": str(job.keys.get("domain", "")), "task_id": str(job.keys.get("task_id", ""))}
    kept = job.entries
    fitted = {"transcript_entries": len(job.entries), "elided_entries": 0, "elided_tokens": 0,
              "context_tokens": int(window or 0)}
    if window:
        rest = llm.count_tokens(JUDGE_SYSTEM + "\n" + job.prompt.fill(transcript="", **values), settings.model)
        room = window - rest - settings.max_tokens - MARGIN
        if room <= 0:
            raise ValueError(f"{job.where}: the prompt '{job.prompt.name}' without the conversation takes {rest} "
                             f"tokens, which with max_tokens={settings.max_tokens} leaves no room in the judge's "
                             f"{window}-token context")
        counts = [llm.count_tokens(entry + "\n", settings.model) for entry in job.entries]
        result = keep_ends(job.entries, counts, room)
        kept = result.entries
        fitted.update(elided_entries=result.elided, elided_tokens=result.elided_tokens)
    text = job.prompt.fill(transcript="\n".join(kept), **values)
    return [{"role": "system", "content": JUDGE_SYSTEM}, {"role": "user", "content": text}], fitted


def judge_one(job: JudgeJob) -> dict[str, Any]:
    """One verdict: the judge asked once (temperature 0) through ``llm.sample`` (which takes answers with or
    without log-probs), its answer read by :func:`read_verdict`; tokens and cost (litellm's cost map; the
    embedded model costs 0; None where litellm has no price)."""
    from agentuq_nb import llm

    settings = job.settings
    messages, fitted = judge_messages(job)
    local = settings.model == EMBEDDED_MODEL
    request = dict(job.request) if local else {"drop_params": True, **job.request}
    generation = llm.sample(messages, k=1, model=settings.model, top_logprobs=settings.top_logprobs,
                            temperature=0.0, seed=0, max_tokens=settings.max_tokens, **request)[0]
    answer = generation.message.get("content") or ""
    verdict = read_verdict(generation.tokens, answer)
    usage = generation.usage or {}
    cost = 0.0 if local else generation.cost
    return {"simulation_id": job.simulation_id, "content_sha256": job.content_sha256, "model": settings.model,
            "prompt": job.prompt.name, "prompt_sha256": job.prompt.sha256, "verdict": verdict.verdict,
            "p_fail": verdict.p_fail, "p_pass": verdict.p_pass, "probability_source": verdict.probability_source,
            "verdict_token": verdict.token, "verdict_position": verdict.position, "verdict_mass": verdict.verdict_mass,
            "answer": answer, "prompt_tokens": usage.get("prompt_tokens"),
            "completion_tokens": usage.get("completion_tokens"), "cost_usd": cost, **fitted}


def judge_on_worker(job: JudgeJob) -> dict[str, Any]:
    """:func:`judge_one` on a Dask worker: a remote judge uses the worker's ``api_base``, if it has one."""
    if job.settings.model != EMBEDDED_MODEL:
        job = replace(job, request=with_worker_api_base(job.request))
    return judge_one(job)


# --------------------------------------------------------------------------- the panel

def judge_name(prompt: str, model: str) -> str:
    """A judge's name, its monitor name in the judge table (``records.monitor_scores``): its prompt and model in
    lower case, other characters as ``-`` (``outcome-openai-gpt-4o``); one longer than 64 characters ends with a
    hash of the whole."""
    name = re.sub(r"[^a-z0-9_\-]+", "-", f"{prompt}-{model}".lower()).strip("-_")
    if len(name) > 64:
        name = f"{name[:55].rstrip('-_')}-{hashlib.sha256(f'{prompt}@{model}'.encode()).hexdigest()[:8]}"
    return name


def panel_scores(table: pd.DataFrame, aggregate: str) -> pd.Series:
    """Per trajectory, the judges' P(fail) (``risk``: one row per trajectory and judge, the judge table) combined by
    ``aggregate`` (:data:`PANEL_AGGREGATES`), over the judges with a verdict on it."""
    if aggregate not in PANEL_AGGREGATES:
        raise ValueError(f"aggregate must be one of {', '.join(PANEL_AGGREGATES)}, got {aggregate!r}")
    values = table[[*TRAJECTORY_KEYS, "risk"]].astype({"risk": float})
    grouped = values.groupby(TRAJECTORY_KEYS, dropna=False)["risk"]
    return getattr(grouped, aggregate)()  # NaNs skipped; NaN where no judge has a value

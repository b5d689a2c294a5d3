"""The learned failure detector's features: one row per trajectory, in switchable groups (calculators only;
the model is :mod:`agentuq_nb.evaluation.detector_model`, the splitting :mod:`agentuq_nb.evaluation.detector_protocols`).

* ``text`` - **role-tagged terms**, counted per trajectory (:func:`role_terms`): the agent's and the user's words and
  word bigrams (``agent:refund``, ``user:already told``), the tools called with each argument key
  (``call:cancel_reservation``, ``call:cancel_reservation.reservation_id``), and what the tool results say of their
  status (``result:ok`` / ``result:error`` / ``result:empty``, the words of an error, of a short plain-text result, and
  the ``status`` values of a JSON result). Words are lower-cased, letters only (2-30 of them): numbers, codes and ids
  (``EHGLP3``, ``mia_li_3668``) are dropped, so that a term says what was said rather than which record it was about.
  The model weighs the counts as TF-IDF fitted on its training rows only.
* ``blackbox`` - the **structure** signals and **TRACER**'s default score and components, as the black-box step
  computes them (:func:`agentuq_nb.uq.blackbox_signals.signal_tables`; without token log-probs: TRACER's U term is
  never used, so a run with log-probs and one without get the same features).
* ``embeddings`` - **sentence embeddings** of the messages (all-MiniLM-L6-v2 through
  :func:`agentuq_nb.uq.embeddings.get_embedder`; each message as TRACER formats it, :mod:`agentuq_nb.uq.transcript`):
  the mean unit vector of the agent's messages, of the user's messages, and the agent's last message (3 × 384).
  TRACER embeds the same texts, so the embedder's cache serves both. Each embedded message is also kept with its
  vector (:attr:`TrajectoryFeatures.messages`, :attr:`TrajectoryFeatures.message_vectors`: its trajectory row,
  position, role and first words), so that an explanation can name the message(s) that moved a block.
* ``length`` - the **length baselines** (``num_messages``, ``num_tool_calls``, ``agent_chars``, as
  :func:`agentuq_nb.records.run_tables.trajectory_record` counts them), as ``log(1 + n)``.
* ``policy`` (:data:`POLICY_GROUP`, not a default) - **policy-grounded events** counted from the messages
  (:mod:`agentuq_nb.uq.policy_events`: a write call without the user's confirmation in the turn before it, a failed
  call repeated with the same arguments, a request for a human, the user restating the goal, …): features meant to
  carry to tasks the detector never saw.
* ``monitors`` (:data:`MONITOR_GROUP`, never a default) - what the run's **monitors** said (imported scores, published
  judge verdicts, LLM judges: :mod:`agentuq_nb.records.monitor_scores`), one column ``monitor.<family>.<monitor>`` per
  monitor, its risk. They come from the run folders, not the messages: the step that reads them adds them
  (:func:`with_monitor_columns`); a trajectory a monitor did not score is missing (the model imputes the training
  median). A monitor that was itself fitted to these labels would leak them past the protocols: import label-blind
  ones.

:func:`extract_features` computes them for a batch of simulations (a job of the job executor: it streams, and runs on
Dask workers as well as here); :meth:`TrajectoryFeatures.concat` joins batches. :func:`prefix_of` cuts a simulation to
its first k agent turns (or a fraction of its messages) for early detection: the length baselines are then the
length so far. :data:`FEATURE_VERSION` names this extraction: a detector made with another is refused.
"""
from __future__ import annotations

import hashlib
import json
import math
import re
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from functools import lru_cache
from typing import TYPE_CHECKING, Any

import numpy as np
import pandas as pd

from agentuq_nb.records import Simulation
from agentuq_nb.records.keys import key_dtypes
from agentuq_nb.records.run_tables import trajectory_record
from agentuq_nb.records.task_identity import content_key, id_key, task_of
from agentuq_nb.records.tokens import TRAJECTORY_KEYS
from agentuq_nb.uq.blackbox_signals import signal_tables
from agentuq_nb.uq.structure_signals import TRAJECTORY_SIGNALS
from agentuq_nb.uq.transcript import transcript

if TYPE_CHECKING:  # scipy.sparse is imported where a matrix is made (~0.2 s a process that makes none)
    import scipy.sparse as sp

#: the version of this extraction: raised whenever a feature is computed differently (a detector folder records it)
FEATURE_VERSION = "1"
#: the feature groups, in column order
GROUPS = ("text", "blackbox", "embeddings", "length")
#: the group of the run's monitors (read from the run folders, never a default group)
MONITOR_GROUP = "monitors"
#: the group of policy-grounded events (:mod:`agentuq_nb.uq.policy_events`; a research group, not a default)
POLICY_GROUP = "policy"
#: every group a detector may use, in column order
ALL_GROUPS = (*GROUPS, POLICY_GROUP, MONITOR_GROUP)
#: a monitor column's name: this prefix and the monitor's estimator name
MONITOR_PREFIX = "monitor."
LENGTH_COLUMNS = ("num_messages", "num_tool_calls", "agent_chars")
#: the black-box columns: the structure signals and TRACER's default score and components (no U: no log-probs)
BLACKBOX_COLUMNS = tuple(f"structure.{s}" for s in TRAJECTORY_SIGNALS) + (
    "tracer.default", "tracer.repetition", "tracer.action_gap", "tracer.user_gap")
_TRACER_SOURCE = {"tracer.default": "tracer_default", "tracer.repetition": "tracer_repetition",
                  "tracer.action_gap": "tracer_action_gap", "tracer.user_gap": "tracer_user_gap"}
#: the embedding blocks (each the size of the embedder's vectors)
EMBEDDING_BLOCKS = ("embedding.agent_mean", "embedding.user_mean", "embedding.agent_last")
#: the embedders a detector is made with (train-detector's ``--embedder``)
EMBEDDERS = ("minilm", "minilm-static", "hash", "none")
#: word pieces MiniLM reads of each text: train-detector's ``embed_max_tokens`` bounds, and a detector card's
EMBED_MAX_TOKENS_RANGE = (8, 512)


def embedder_dim(embedder: str) -> int:
    """The size of ``embedder``'s vectors (an embedding block's columns; 0 for ``none``)."""
    if embedder == "hash":
        from agentuq_nb.uq.embeddings import HashEmbedder

        return HashEmbedder().dim
    if embedder == "minilm-static":
        from agentuq_nb.uq.static_embedding import DIMS

        return DIMS
    return {"minilm": 384, "none": 0}[embedder]
#: characters of a message read for its terms (a longer one is cut: a term list stays bounded)
MAX_TERM_CHARS = 20_000
#: a tool result of at most this many characters that is not JSON is a status message: its words are terms
SHORT_RESULT_CHARS = 300
WORD = re.compile(r"\w+")
#: characters of a message kept to name it in an explanation
HEAD_CHARS = 160
ROLE_TAGS = {"assistant": "agent", "user": "user"}


def words(text: str) -> list[str]:
    """The words of ``text`` a term is made of: lower-cased, letters only, 2-30 of them."""
    return [w for w in WORD.findall(text[:MAX_TERM_CHARS].lower()) if w.isalpha() and 2 <= len(w) <= 30]


def result_status_terms(content: str, is_error: bool) -> list[str]:
    """What a tool result says of its status (see the module docstring)."""
    text = content.strip()
    if is_error:
        return ["result:error"] + [f"result:{w}" for w in words(text[:500])]
    if not text:
        return ["result:empty"]
    out = ["result:ok"]
    if text[:1] in "{[":
        try:
            parsed = json.loads(text[:MAX_TERM_CHARS])
        except ValueError:
            return out
        if isinstance(parsed, dict) and isinstance(parsed.get("status"), str):
            out += [f"result:status_{w}" for w in words(parsed["status"])]
    elif len(text) <= SHORT_RESULT_CHARS:
        out += [f"result:{w}" for w in words(text)]
    return out


def message_terms(role: str, content: str, calls: list[tuple[str, Any]], is_error: bool) -> list[str]:
    """The role-tagged terms of one message (see the module docstring)."""
    out: list[str] = []
    if role == "tool":
        return result_status_terms(content, is_error)
    tag = ROLE_TAGS.get(role)
    if tag is None:
        return out
    said = words(content)
    out += [f"{tag}:{w}" for w in said]
    out += [f"{tag}:{a} {b}" for a, b in zip(said, said[1:])]
    for name, arguments in calls:
        name = shown_name(str(name))
        out.append(f"call:{name}")
        if isinstance(arguments, dict):
            out += [f"call:{name}.{shown_name(str(key))}" for key in arguments]
    return out


@lru_cache(maxsize=4096)
def shown_name(name: str) -> str:
    """A tool's or an argument's name as a term holds it: a secret in it (an API key's shape, an environment key's
    value) masked at the source, so that no detector folder - made to be shared - records it (its card, terms,
    top_features.csv, every predictions.csv)."""
    from agentuq_nb.common.redaction import redact

    return redact(name)


def role_terms(transcript_frame: pd.DataFrame) -> list[list[str]]:
    """The terms of each trajectory of a transcript (:mod:`agentuq_nb.uq.transcript`), in trajectory order."""
    t = transcript_frame
    if t.empty:
        return []
    groups = t[TRAJECTORY_KEYS].ne(t[TRAJECTORY_KEYS].shift()).any(axis=1).cumsum().to_numpy() - 1
    out: list[list[str]] = [[] for _ in range(int(groups.max()) + 1)]
    for g, role, content, calls, error in zip(groups, t["role"], t["content"], t["calls"], t["is_error"]):
        out[g].extend(message_terms(role, content, calls, bool(error)))
    return out


def fingerprint(sim: Simulation) -> int:
    """A 63-bit hash of a trajectory's task and messages (role, content, tool calls): finds a trajectory a detector was
    trained on, whatever file or run folder it comes in."""
    body = [str(sim.task_id)] + [[m.role, m.content or "", [[c.name, c.arguments] for c in (m.tool_calls or [])]]
                                 for m in sim.messages]
    digest = hashlib.blake2b(json.dumps(body, sort_keys=True, default=str).encode(), digest_size=8).digest()
    return int.from_bytes(digest, "big") >> 1


def agent_turns(sim: Simulation) -> int:
    return sum(m.role == "assistant" for m in sim.messages)


def prefix_of(sim: Simulation, turns: int | None = None, fraction: float | None = None) -> Simulation:
    """``sim`` cut to its first ``turns`` agent messages (up to and with the ``turns``-th; all of it when it has fewer)
    or to the first ``ceil(fraction × messages)`` messages; the reward is kept (the label of the whole trajectory)."""
    if (turns is None) == (fraction is None):
        raise ValueError("give the prefix as turns or as a fraction, one of them")
    messages = sim.messages
    if turns is not None:
        if turns < 1:
            raise ValueError(f"turns must be >= 1, not {turns}")
        agent = [i for i, m in enumerate(messages) if m.role == "assistant"]
        end = agent[turns - 1] + 1 if len(agent) >= turns else len(messages)
    else:
        if not 0 < fraction <= 1:
            raise ValueError(f"fraction must be in (0, 1], not {fraction}")
        end = math.ceil(fraction * len(messages))
    return sim.model_copy(update={"messages": messages[:end]})


@dataclass
class TrajectoryFeatures:
    """Features of a set of trajectories (see the module docstring).

    ``index``: one row per trajectory: the keys, ``simulation_id``, ``reward`` (NaN without), the length baselines as
    counted, ``agent_turns``, ``fingerprint`` and ``task_key`` (the task's identity within its domain: a hash of its
    instructions, ``content:…``, or ``id:<task id>`` where the results hold none); ``vocabulary`` and ``counts`` (CSR, rows × terms): the text group's
    term counts; ``dense`` (rows × columns) with ``dense_names``: the other groups' columns (``blackbox``, embeddings
    block by block, ``length``), ``dense_groups`` the group of each. Groups not extracted are absent. With the
    ``embeddings`` group, ``messages`` (``row, message_idx, role, head``: each embedded message's trajectory row,
    position in the trajectory, role and first :data:`HEAD_CHARS` characters) and ``message_vectors`` (its unit
    vector, float32, one row per message)."""

    index: pd.DataFrame
    groups: tuple[str, ...]
    vocabulary: list[str] = field(default_factory=list)
    counts: sp.csr_matrix | None = None
    dense: np.ndarray | None = None
    dense_names: list[str] = field(default_factory=list)
    dense_groups: list[str] = field(default_factory=list)
    messages: pd.DataFrame | None = None
    message_vectors: np.ndarray | None = None

    def __len__(self) -> int:
        return len(self.index)

    def take(self, rows) -> "TrajectoryFeatures":
        """The rows ``rows`` (positions or a mask), in that order."""
        rows = np.flatnonzero(rows) if np.asarray(rows).dtype == bool else np.asarray(rows, dtype=np.intp)
        messages = vectors = None
        if self.messages is not None:
            new_row = np.full(len(self), -1, dtype=np.int64)
            new_row[rows] = np.arange(len(rows))  # (a row taken twice keeps its messages once, at its last place)
            at = new_row[self.messages["row"].to_numpy(dtype=np.int64)]
            keep = np.flatnonzero(at >= 0)
            keep = keep[np.argsort(at[keep], kind="stable")]
            messages = self.messages.iloc[keep].assign(row=at[keep]).reset_index(drop=True)
            vectors = self.message_vectors[keep]
        return TrajectoryFeatures(self.index.iloc[rows].reset_index(drop=True), self.groups, self.vocabulary,
                                  None if self.counts is None else self.counts[rows],
                                  None if self.dense is None else self.dense[rows], self.dense_names, self.dense_groups,
                                  messages, vectors)

    def dense_of(self, groups: Iterable[str]) -> tuple[list[str], np.ndarray]:
        """``(names, columns)`` of the dense columns of ``groups``."""
        wanted = set(groups)
        cols = [i for i, g in enumerate(self.dense_groups) if g in wanted]
        names = [self.dense_names[i] for i in cols]
        values = self.dense[:, cols] if self.dense is not None else np.zeros((len(self), 0))
        return names, values

    @classmethod
    def concat(cls, parts: Sequence["TrajectoryFeatures"]) -> "TrajectoryFeatures":
        """The rows of ``parts`` one after the other (their vocabularies merged; the dense columns must agree)."""
        import scipy.sparse as sp

        parts = [p for p in parts if len(p)] or list(parts[:1])
        if not parts:
            raise ValueError("no features to join")
        first = parts[0]
        for p in parts[1:]:
            if p.groups != first.groups or p.dense_names != first.dense_names:
                raise ValueError("feature batches of different groups or columns cannot be joined")
        index = pd.concat([p.index for p in parts], ignore_index=True)
        counts, vocabulary = None, []
        if first.counts is not None:
            ids: dict[str, int] = {}
            for p in parts:
                for term in p.vocabulary:
                    ids.setdefault(term, len(ids))
            blocks = []
            for p in parts:
                mapping = np.array([ids[t] for t in p.vocabulary], dtype=np.int64)
                c = p.counts.tocsr()
                blocks.append(sp.csr_matrix((c.data, mapping[c.indices] if len(mapping) else c.indices, c.indptr),
                                            shape=(c.shape[0], len(ids))))
            counts, vocabulary = sp.vstack(blocks, format="csr"), list(ids)
        dense = None if first.dense is None else np.vstack([p.dense for p in parts])
        messages = vectors = None
        if all(p.messages is not None for p in parts):
            offsets = np.cumsum([0] + [len(p) for p in parts[:-1]])
            messages = pd.concat([p.messages.assign(row=p.messages["row"] + o) for p, o in zip(parts, offsets)],
                                 ignore_index=True)
            vectors = np.vstack([p.message_vectors for p in parts])
        return cls(index, first.groups, vocabulary, counts, dense, first.dense_names, first.dense_groups, messages,
                   vectors)


def check_groups(groups: Iterable[str]) -> tuple[str, ...]:
    """``groups`` in :data:`ALL_GROUPS` order, each known, at least one."""
    given = list(groups)
    unknown = [g for g in given if g not in ALL_GROUPS]
    if unknown or not given:
        raise ValueError(f"feature groups must be among {', '.join(ALL_GROUPS)} (at least one), not {given}")
    return tuple(g for g in ALL_GROUPS if g in given)


def with_monitor_columns(features: TrajectoryFeatures, monitors: pd.DataFrame) -> TrajectoryFeatures:
    """``features`` with one dense column per monitor (group :data:`MONITOR_GROUP`): ``monitors`` holds ``run``, the
    trajectory keys and one column per monitor (its estimator's name: the risk it gave the trajectory); a row of
    ``features`` no monitor scored gets NaN (imputed by the model)."""
    names = [c for c in monitors.columns if c not in (*TRAJECTORY_KEYS, "run")]
    keys = ["run", *TRAJECTORY_KEYS]
    joined = key_dtypes(features.index[keys], deep=False).merge(key_dtypes(monitors, deep=False), on=keys,
                                                                how="left", validate="many_to_one")
    values = joined[names].to_numpy(dtype=float) if names else np.zeros((len(features), 0))
    dense = values if features.dense is None else np.hstack([features.dense, values])
    return TrajectoryFeatures(features.index, features.groups, features.vocabulary, features.counts, dense,
                              [*features.dense_names, *(MONITOR_PREFIX + n for n in names)],
                              [*features.dense_groups, *([MONITOR_GROUP] * len(names))])


def needs_embeddings(groups: Iterable[str]) -> bool:
    """Whether the groups need sentence embeddings (TRACER's components, the embedding blocks)."""
    return bool({"blackbox", "embeddings"} & set(groups))


def count_terms(term_lists: list[list[str]]) -> tuple[list[str], sp.csr_matrix]:
    """``(vocabulary, counts)`` of term lists: one CSR row per list (scikit-learn's ``CountVectorizer`` over the lists)."""
    import scipy.sparse as sp
    from sklearn.feature_extraction.text import CountVectorizer

    if not any(term_lists):
        return [], sp.csr_matrix((len(term_lists), 0), dtype=np.int32)
    vectorizer = CountVectorizer(analyzer=lambda terms: terms, lowercase=False, dtype=np.int32)
    counts = vectorizer.fit_transform(term_lists).tocsr()
    return list(vectorizer.get_feature_names_out()), counts


def embedding_blocks(t: pd.DataFrame, embed: Callable[[list[str]], np.ndarray], n: int,
                     messages: dict[str, Any] | None = None) -> np.ndarray:
    """(n, 3 × d): per trajectory of the transcript ``t`` (``n`` of them, in order) the mean unit embedding of the
    agent's messages, of the user's, and the agent's last message (zeros where there is none). ``messages`` (a dict)
    is given the embedded messages (``frame``: ``row, message_idx, role, head``) and their ``vectors``."""
    groups = t[TRAJECTORY_KEYS].ne(t[TRAJECTORY_KEYS].shift()).any(axis=1).cumsum().to_numpy() - 1
    role, text = t["role"].to_numpy(), t["text"].to_numpy()
    used = np.isin(role, ("assistant", "user")) & (text != "")
    texts = list(dict.fromkeys(text[used]))
    vectors = np.asarray(embed(texts), dtype=float) if texts else np.zeros((0, 1))
    d = vectors.shape[1] if len(texts) else 384
    row_of = {s: i for i, s in enumerate(texts)}
    out = np.zeros((n, 3 * d))
    for block, who in enumerate(("assistant", "user")):
        rows = np.flatnonzero(used & (role == who))
        if len(rows):
            v = vectors[[row_of[s] for s in text[rows]]]
            sums = np.zeros((n, d))
            np.add.at(sums, groups[rows], v)
            counts = np.bincount(groups[rows], minlength=n)[:, None]
            out[:, block * d:(block + 1) * d] = sums / np.maximum(counts, 1)
    agent = np.flatnonzero(used & (role == "assistant"))
    if len(agent):
        last = pd.Series(agent).groupby(groups[agent]).last()
        out[last.index.to_numpy(), 2 * d:] = vectors[[row_of[s] for s in text[last.to_numpy()]]]
    if messages is not None:
        at = np.flatnonzero(used)
        messages["frame"] = pd.DataFrame({"row": groups[at].astype(np.int64),
                                          "message_idx": t["message_idx"].to_numpy(dtype=np.int64)[at],
                                          "role": role[at].astype(str),
                                          "head": [s[:HEAD_CHARS] for s in text[at]]})
        messages["vectors"] = vectors[[row_of[s] for s in text[at]]].astype(np.float32) if len(at) else \
            np.zeros((0, d), dtype=np.float32)
    return out


def task_key_of(sim: Simulation, task_contents: dict[str, str] | None = None) -> str:
    """The task's identity within its domain (:mod:`agentuq_nb.records.task_identity`): the content key the results
    header gives its id (``task_contents``), else the content key of τ-bench's ``info.task``, else ``id:<task id>``."""
    known = (task_contents or {}).get(str(sim.task_id))
    return known or content_key(task_of(sim.task_id, sim.model_extra, {})) or id_key(sim.task_id)


def extract_features(sims: Iterable[Simulation], domain: str, groups: Sequence[str] = GROUPS,
                     embed: Callable[[list[str]], np.ndarray] | None = None,
                     tool_kinds: dict[str, str] | None = None,
                     task_contents: dict[str, str] | None = None) -> TrajectoryFeatures:
    """The features of ``groups`` for ``sims`` (one domain; see the module docstring). ``embed(texts)`` returns unit
    vectors (None: the columns that need embeddings are NaN - TRACER and ``structure.user_repetition`` - and the
    ``embeddings`` group is refused); ``tool_kinds``: tool name → read/write where the results define them;
    ``task_contents``: task id → content key of the results header's tasks (each row's ``task_key``:
    :func:`task_key_of`)."""
    groups = check_groups(groups)
    if "embeddings" in groups and embed is None:
        raise ValueError("the 'embeddings' feature group needs an embedder")
    sims = list(sims)
    records = [trajectory_record(s, domain) for s in sims]
    index = pd.DataFrame(records, columns=TRAJECTORY_KEYS + ["simulation_id", "reward", *LENGTH_COLUMNS])
    index["reward"] = pd.to_numeric(index["reward"], errors="coerce").astype(float)
    index["agent_turns"] = [agent_turns(s) for s in sims]
    index["fingerprint"] = np.array([fingerprint(s) for s in sims], dtype=np.int64)
    index["task_key"] = pd.Series([task_key_of(s, task_contents) for s in sims], dtype=object)
    index = key_dtypes(index, deep=False)
    out = TrajectoryFeatures(index, groups)
    if not sims:
        return out
    t = transcript(sims, domain)
    if "text" in groups:
        out.vocabulary, out.counts = count_terms(role_terms(t))
    names, columns, kinds = [], [], []
    if "blackbox" in groups:
        _, scores = signal_tables(t, embed, None, tool_kinds or {}, index[TRAJECTORY_KEYS])
        for name in BLACKBOX_COLUMNS:
            source = _TRACER_SOURCE.get(name, name.removeprefix("structure."))
            values = scores[source].to_numpy(dtype=float) if source in scores else np.full(len(index), np.nan)
            names.append(name)
            columns.append(values[:, None])
            kinds.append("blackbox")
    if "embeddings" in groups:
        kept: dict[str, Any] = {}
        blocks = embedding_blocks(t, embed, len(index), kept)
        out.messages, out.message_vectors = kept["frame"], kept["vectors"]
        d = blocks.shape[1] // 3
        for b, block in enumerate(EMBEDDING_BLOCKS):
            names += [f"{block}:{i}" for i in range(d)]
            columns.append(blocks[:, b * d:(b + 1) * d])
            kinds += ["embeddings"] * d
    if "length" in groups:
        for name in LENGTH_COLUMNS:
            names.append(f"length.{name}")
            columns.append(np.log1p(index[name].to_numpy(dtype=float))[:, None])
            kinds.append("length")
    if POLICY_GROUP in groups:
        from agentuq_nb.uq.policy_events import POLICY_COLUMNS, policy_events

        names += list(POLICY_COLUMNS)
        columns.append(policy_events(t, len(index), tool_kinds))
        kinds += [POLICY_GROUP] * len(POLICY_COLUMNS)
    if columns:
        out.dense, out.dense_names, out.dense_groups = np.hstack(columns), names, kinds
    return out


def block_of(name: str) -> str:
    """The name a feature is reported under: an embedding dimension under its block, any other under its own."""
    return name.split(":", 1)[0] if name.startswith("embedding.") else name


@dataclass
class FeatureJob:
    """One batch of simulations to extract (a job of the job executor; picklable, so a Dask worker runs it): the
    embedder is named (``minilm``, ``minilm-static``, ``hash``, ``none``) and made where the job runs, once per process."""

    sims: list[Simulation]
    domain: str
    groups: tuple[str, ...]
    embedder: str = "minilm"
    embed_max_tokens: int | None = 128
    tool_kinds: dict[str, str] = field(default_factory=dict)
    turns: int | None = None  # a prefix: the first k agent turns
    fraction: float | None = None  # or the first fraction of the messages
    task_contents: dict[str, str] = field(default_factory=dict)  # task id -> content key (the results header's)


def unit_embedder(name: str, max_tokens: int | None) -> Callable[[list[str]], np.ndarray] | None:
    """``embed(texts)`` giving unit vectors from the named embedder (None for ``none``)."""
    from agentuq_nb.uq.embeddings import get_embedder, unit_rows

    if name == "none":
        return None
    embedder = get_embedder(name, max_tokens)

    def embed(texts: list[str]) -> np.ndarray:
        return unit_rows(np.asarray(embedder.embed(list(texts)), dtype=float)) if texts else np.zeros((0, 1))

    return embed


def extract_job(job: FeatureJob) -> TrajectoryFeatures:
    """The features of one :class:`FeatureJob` (its simulations cut to the prefix it names, if any)."""
    sims = job.sims
    if job.turns is not None or job.fraction is not None:
        sims = [prefix_of(s, job.turns, job.fraction) for s in sims]
    embed = unit_embedder(job.embedder, job.embed_max_tokens) if needs_embeddings(job.groups) else None
    return extract_features(sims, job.domain, job.groups, embed, job.tool_kinds, job.task_contents)

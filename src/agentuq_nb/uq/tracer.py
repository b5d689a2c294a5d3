"""TRACER's trajectory risk, as its paper and code define it (family ``tracer``).

TRACER (ICML 2026; code sinatayebati/agent-tracer, ``src/tau2/metrics/uncertainty.py``, its orchestrator
and ``scripts/optimize_tracer_parameters.py``) scores every **step** - each agent and user message - by

* ``U``: content-token NLL, the mean ``-log p`` of the message's tokens after dropping near-certain tokens
  (log-prob > -0.05), stop words (:data:`STOP_WORDS`, TRACER's list) and numbers; ``1e-4`` when the
  message has log-probs but no content token; absent (0 in the risk) where the run has no log-probs;
* ``D_a`` (agent messages): repetition, the larger of (a) the largest ``clip(cos, 0, 1) × Jaccard`` of the
  message's text against the agent's last 3 earlier texts (cosine of embeddings; Jaccard of content
  words: lower-cased, punctuation stripped, stop words and numbers dropped) and (b) 1 when one of its
  tool calls repeats one of the agent's last 5 tool-calling messages exactly (canonical keys here,
  :func:`~agentuq_nb.records.actions.canonical_tool_call`; TRACER compares name and sorted arguments);
* ``D_o,agent`` (agent messages that call tools): coherence, ``1 - cos`` between the call's text
  (content and ``Tool: name(arguments)``) and its observations (``Observation: …`` joined by " | "),
  clamped to [0, 2];
* ``D_o,user`` (user messages): ``1 - cos`` between the agent's last message and the user's reply; for a
  user message that calls tools (telecom), between the call and its observations, as TRACER's
  orchestrator overwrites it;

``risk_i = max(U_i, α·D_a,i, β·D_o,agent,i, γ·D_o,user,i)`` (a missing component counts 0), and the
trajectory score ``(1 - w)·mean(top-k % of the step risks) + w·max(step risks)``, the top k % being the
``max(1, floor(k·N))`` largest of N steps. Defaults :class:`TracerParams` are TRACER's ``TRACERConfig``
(α = β = γ = 1, k = 0.1, w = 0.1); :data:`GRID` is the coarse grid of its optimizer (32,000 settings).

Differences from TRACER's code, each forced or deliberate: embeddings come from the bundled
all-MiniLM-L6-v2 (TRACER calls Vertex AI's ``text-embedding-004``, which reads ~20k tokens of a text): by default
its static distillation, which reads whole texts (:mod:`agentuq_nb.uq.static_embedding`), or the transformer, which
reads the first 128 word pieces (``embedder="minilm"``; the cosines feed this module, whichever made them); D_a's text is the message's content, as TRACER's optimizer (which made its
published numbers) computes it. How the parameters are tuned - on other tasks, or on the evaluated run as
TRACER does - is evaluation's (:mod:`agentuq_nb.evaluation.tracer_tuning`).
"""
from __future__ import annotations

import itertools
import re
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import pandas as pd
from pydantic import BaseModel, ConfigDict, Field

from agentuq_nb.records.tokens import TRAJECTORY_KEYS
from agentuq_nb.uq.embeddings import stable_cosine
from agentuq_nb.uq.structure_signals import split_by_trajectory, trajectory_positions

#: TRACER's stop words and structural tokens (its ``STOP_WORDS``), dropped from U and from Jaccard's word sets
STOP_WORDS = frozenset({
    "the", "is", "are", "was", "were", "be", "been", "being", "a", "an", "to", "of", "in", "on", "at", "for", "with",
    "from", "by", "as", "or", "and", "but", "if", "then", "this", "that", "these", "those", "it", "its", "i", "you",
    "he", "she", "we", "they", "my", "your", "his", "her", "am", "can", "will", "would", "could", "should", "may",
    "have", "has", "had", "do", "does", "did", "please", "sorry", "wait", "help", "need", "want",
    "[tool_call]", "\\n", "\n", " ", "", ".", ",", "!", "?", ":", ";", "-", "(", ")", "[", "]", "{", "}", "'", '"',
})
PUNCTUATION = ".,!?;:()[]{}\"'-"
#: log-prob above which a token is near-certain (p > 0.951) and left out of U
NEAR_CERTAIN_LOGPROB = -0.05
#: U of a message whose every token was left out (TRACER's epsilon)
ALL_FILTERED_U = 1e-4
TEXT_WINDOW = 3  # earlier agent texts D_a compares against
TOOL_WINDOW = 5  # earlier tool-calling agent messages D_a's tool repetition looks at
COMPONENTS = ("tracer_u", "tracer_da", "tracer_do_agent", "tracer_do_user")
_NUMBER = re.compile(r"^[\d.\-]+$")


class TracerParams(BaseModel):
    """TRACER's parameters; the defaults are its ``TRACERConfig``'s."""

    model_config = ConfigDict(frozen=True)

    alpha: float = Field(1.0, ge=0, description="weight of repetition D_a")
    beta: float = Field(1.0, ge=0, description="weight of agent coherence D_o,agent")
    gamma: float = Field(1.0, ge=0, description="weight of user coherence D_o,user")
    top_k: float = Field(0.1, gt=0, le=1, description="share of the riskiest steps averaged")
    w: float = Field(0.1, ge=0, le=1, description="weight of the single riskiest step")


@dataclass(frozen=True)
class Grid:
    """A product grid over :class:`TracerParams`; rows of :meth:`settings` in ``itertools.product`` order."""

    alpha: tuple[float, ...]
    beta: tuple[float, ...]
    gamma: tuple[float, ...]
    top_k: tuple[float, ...]
    w: tuple[float, ...]

    def settings(self) -> np.ndarray:
        return np.array(list(itertools.product(self.alpha, self.beta, self.gamma, self.top_k, self.w)), dtype=float)

    @staticmethod
    def params(row) -> TracerParams:
        a, b, g, k, w = (float(x) for x in row)
        return TracerParams(alpha=a, beta=b, gamma=g, top_k=k, w=w)


_WEIGHTS = (0.0, 0.5, 1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 8.0, 10.0)
#: the coarse grid of TRACER's ``optimize_tracer_parameters.py`` (stage 1, "auto" mode's first stage)
GRID = Grid(alpha=_WEIGHTS, beta=_WEIGHTS, gamma=_WEIGHTS, top_k=(0.05, 0.1, 0.15, 0.2, 0.25, 0.3, 0.35, 0.4),
            w=(0.0, 0.1, 0.2, 0.3))


def clean_tokens(tokens: pd.Series) -> pd.Series:
    """Tokens as TRACER compares them: stripped, lower-cased, punctuation stripped from both ends."""
    return tokens.astype("string").str.strip().str.lower().str.strip(PUNCTUATION)


def is_content(cleaned: pd.Series) -> np.ndarray:
    """Whether cleaned tokens carry content: not empty, not a stop word, not a number."""
    c = cleaned.fillna("")
    number = c.str.replace(".", "", regex=False).str.replace("-", "", regex=False).str.isdigit()
    return ((c != "") & ~c.isin(STOP_WORDS) & ~number.fillna(False)).to_numpy(dtype=bool)


def content_token_nll(tokens: pd.DataFrame) -> pd.DataFrame:
    """U per message (keys, ``message_idx``, ``tracer_u``) from token rows (``token``, ``chosen_logprob``)."""
    keys = TRAJECTORY_KEYS + ["message_idx"]
    if tokens.empty:
        return pd.DataFrame(columns=keys + ["tracer_u"])
    lp = tokens["chosen_logprob"].to_numpy(dtype=float)
    keep = (lp <= NEAR_CERTAIN_LOGPROB) & is_content(clean_tokens(tokens["token"]))
    nll = pd.Series(np.where(keep, -lp, 0.0), index=tokens.index)
    sums = tokens[keys].assign(nll=nll, kept=keep.astype(float)).groupby(keys, dropna=False, sort=False).sum()
    u = np.where(sums["kept"] > 0, sums["nll"] / sums["kept"].where(sums["kept"] > 0, 1.0), ALL_FILTERED_U)
    return sums.index.to_frame(index=False).assign(tracer_u=u)


def content_words(text: str) -> set[str]:
    """Jaccard's word set: whitespace-split, lower-cased, punctuation stripped, no stop words or numbers."""
    words = (w.strip(PUNCTUATION) for w in text.lower().split())
    return {w for w in words if w and w not in STOP_WORDS and not _NUMBER.match(w)}


def jaccard(a: set[str], b: set[str]) -> float:
    return len(a & b) / len(a | b) if a and b else 0.0


def distance(u: np.ndarray, v: np.ndarray) -> float:
    """``1 - cos`` of unit vectors (cos to :data:`~agentuq_nb.uq.embeddings.COSINE_DECIMALS` decimals), clamped to
    [0, 2]."""
    return float(np.clip(1.0 - stable_cosine(float(u @ v)), 0.0, 2.0))


def following_observations(rows: np.ndarray, pos: int, role: np.ndarray) -> list[int]:
    """The tool results right after position ``pos`` of a trajectory (its ``rows``)."""
    out = []
    for r in rows[pos + 1:]:
        if role[r] != "tool":
            break
        out.append(r)
    return out


def tracer_components(transcript: pd.DataFrame, embed: Callable[[list[str]], np.ndarray],
                      u: pd.DataFrame | None = None) -> pd.DataFrame:
    """Per message: keys, ``message_idx``, ``turn_idx``, ``role``, ``is_step`` (agent and user messages) and
    :data:`COMPONENTS` (NaN where a component does not apply). ``embed(texts)`` gives unit vectors (one
    batched call for the whole transcript); ``u``: :func:`content_token_nll` of the run's tokens, if any."""
    t = transcript
    role = t["role"].to_numpy()
    content = t["content"].to_numpy()
    text = t["text"].to_numpy()
    groups = trajectory_positions(t)
    calls = t["calls"].to_numpy()
    obs_text: dict[int, str] = {}
    for rows in split_by_trajectory(np.arange(len(t)), groups):
        for pos, r in enumerate(rows):
            if role[r] in ("assistant", "user") and calls[r]:
                obs = following_observations(rows, pos, role)
                if obs:
                    obs_text[r] = " | ".join(text[o] for o in obs)
    wanted = [content[r] for r in np.flatnonzero(role == "assistant") if content[r]]
    wanted += [text[r] for r in np.flatnonzero(np.isin(role, ("assistant", "user"))) if text[r]]
    wanted += list(obs_text.values())
    unique = list(dict.fromkeys(wanted))
    vectors = np.asarray(embed(unique), dtype=float) if unique else np.zeros((0, 1))
    vec = dict(zip(unique, vectors))
    da = np.full(len(t), np.nan)
    do_agent = np.full(len(t), np.nan)
    do_user = np.full(len(t), np.nan)
    keys = t["call_keys"].to_numpy()
    for rows in split_by_trajectory(np.arange(len(t)), groups):
        texts: list[str] = []  # the agent's earlier non-empty contents
        calls: list[list[tuple]] = []  # the agent's earlier tool-calling messages' keys
        last_agent: str = ""
        for r in rows:
            if role[r] == "assistant":
                text_rep = 0.0
                if content[r]:
                    now = content[r]
                    words = content_words(now)
                    for past in texts[-TEXT_WINDOW:]:
                        cos = float(np.clip(stable_cosine(float(vec[now] @ vec[past])), 0.0, 1.0))
                        text_rep = max(text_rep, cos * jaccard(words, content_words(past)))
                    texts.append(now)
                tool_rep = 0.0
                if keys[r]:
                    recent = {k for past in calls[-TOOL_WINDOW:] for k in past}
                    tool_rep = 1.0 if any(k in recent for k in keys[r]) else 0.0
                    calls.append(keys[r])
                da[r] = max(text_rep, tool_rep)
                if r in obs_text and text[r]:
                    do_agent[r] = distance(vec[text[r]], vec[obs_text[r]])
                if text[r]:
                    last_agent = text[r]
            elif role[r] == "user":
                if r in obs_text and text[r]:
                    do_user[r] = distance(vec[text[r]], vec[obs_text[r]])
                elif last_agent and text[r]:
                    do_user[r] = distance(vec[last_agent], vec[text[r]])
    out = t[TRAJECTORY_KEYS + ["message_idx", "turn_idx", "role"]].copy()
    out["is_step"] = np.isin(role, ("assistant", "user"))
    out["tracer_u"] = np.nan
    if u is not None and len(u):
        merged = out[TRAJECTORY_KEYS + ["message_idx"]].merge(u, on=TRAJECTORY_KEYS + ["message_idx"], how="left")
        out["tracer_u"] = np.where(out["is_step"], merged["tracer_u"].to_numpy(dtype=float), np.nan)
    out["tracer_da"], out["tracer_do_agent"], out["tracer_do_user"] = da, do_agent, do_user
    return out


@dataclass
class StepArrays:
    """The steps of T trajectories padded to S columns: components with missing = 0, and each trajectory's
    number of steps. Built once, scored for any parameters (:func:`tracer_scores`, :func:`grid_scores`)."""

    u: np.ndarray
    da: np.ndarray
    do_agent: np.ndarray
    do_user: np.ndarray
    n_steps: np.ndarray

    @classmethod
    def of(cls, components: pd.DataFrame, trajectories: pd.DataFrame) -> "StepArrays":
        """Steps of ``components`` (:func:`tracer_components`) for the rows of ``trajectories`` (its keys), in
        that order; a trajectory without steps has ``n_steps`` 0 (its score is NaN)."""
        steps = components[components["is_step"]]
        index = trajectories[TRAJECTORY_KEYS].reset_index(drop=True).reset_index(names="_row")
        steps = steps.merge(index, on=TRAJECTORY_KEYS, how="inner")
        row = steps["_row"].to_numpy()
        col = steps.groupby("_row", sort=False).cumcount().to_numpy()
        T, S = len(index), int(col.max()) + 1 if len(col) else 1
        arrays = {}
        for name, column in (("u", "tracer_u"), ("da", "tracer_da"), ("do_agent", "tracer_do_agent"),
                             ("do_user", "tracer_do_user")):
            a = np.zeros((T, S))
            a[row, col] = np.nan_to_num(steps[column].to_numpy(dtype=float), nan=0.0)
            arrays[name] = a
        n_steps = np.bincount(row, minlength=T)
        return cls(n_steps=n_steps, **arrays)

    @property
    def mask(self) -> np.ndarray:
        return np.arange(self.u.shape[1])[None, :] < self.n_steps[:, None]


def step_risk(u, da, do_agent, do_user, alpha, beta, gamma) -> np.ndarray:
    """``max(U, α·D_a, β·D_o,agent, γ·D_o,user)`` elementwise (components with missing = 0)."""
    return np.maximum(np.maximum(u, alpha * da), np.maximum(beta * do_agent, gamma * do_user))


def aggregate_risks(sorted_desc: np.ndarray, n_steps: np.ndarray, top_k, w) -> np.ndarray:
    """Trajectory scores from step risks sorted in descending order along the last axis (padding after the
    ``n_steps`` real ones): ``(1 - w)·mean(top max(1, floor(k·N))) + w·max``. ``top_k`` and ``w`` broadcast
    against the leading axes."""
    n = np.maximum(1, np.floor(np.asarray(top_k)[..., None] * n_steps).astype(int))  # (..., T)
    csum = np.cumsum(np.where(np.isfinite(sorted_desc), sorted_desc, 0.0), axis=-1)
    top_mean = np.take_along_axis(csum, np.minimum(n, sorted_desc.shape[-1])[..., None] - 1, axis=-1)[..., 0] / n
    w = np.asarray(w)[..., None]
    out = (1.0 - w) * top_mean + w * sorted_desc[..., 0]
    return np.where(n_steps > 0, out, np.nan)


def sorted_risks(steps: StepArrays, alpha, beta, gamma) -> np.ndarray:
    """Step risks for weight vectors (alpha, beta, gamma of shape (B,)), sorted descending: (B, T, S)."""
    a, b, g = (np.asarray(x, dtype=float)[:, None, None] for x in (alpha, beta, gamma))
    risk = step_risk(steps.u[None], steps.da[None], steps.do_agent[None], steps.do_user[None], a, b, g)
    risk = np.where(steps.mask[None], risk, -np.inf)
    return -np.sort(-risk, axis=-1)


def tracer_scores(steps: StepArrays, params: TracerParams = TracerParams()) -> np.ndarray:
    """One TRACER score per trajectory of ``steps``."""
    risks = sorted_risks(steps, [params.alpha], [params.beta], [params.gamma])[0]
    return aggregate_risks(risks, steps.n_steps, params.top_k, params.w)


def grid_score_chunks(steps: StepArrays, grid: Grid = GRID, chunk: int = 64):
    """The rows of :func:`grid_scores` a chunk at a time: ``(first row, scores of ``chunk`` weight triples × every
    (k, w))`` - so that a search over the grid holds one chunk of (settings × trajectories), not all of it."""
    weights = np.array(list(itertools.product(grid.alpha, grid.beta, grid.gamma)), dtype=float)
    kw = np.array(list(itertools.product(grid.top_k, grid.w)), dtype=float)  # (K, 2)
    for start in range(0, len(weights), chunk):
        wts = weights[start:start + chunk]
        risks = sorted_risks(steps, wts[:, 0], wts[:, 1], wts[:, 2])  # (b, T, S)
        scores = aggregate_risks(risks[:, None], steps.n_steps, kw[None, :, 0], kw[None, :, 1])
        yield start * len(kw), scores.reshape(len(wts) * len(kw), -1)


def grid_scores(steps: StepArrays, grid: Grid = GRID, chunk: int = 64) -> np.ndarray:
    """TRACER scores of every setting of ``grid``: (n_settings, T), rows in :meth:`Grid.settings` order.

    The step risks depend on (α, β, γ) only: they are computed and sorted once per weight triple (in chunks
    of ``chunk`` triples), and every (k, w) is read off their cumulative sums."""
    parts = [scores for _, scores in grid_score_chunks(steps, grid, chunk)]
    return np.vstack(parts) if parts else np.empty((0, len(steps.n_steps)))

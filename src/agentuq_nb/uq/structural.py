"""Structural and conceptual uncertainty of one prompt (the Watchful method), offline.

For ``n`` sampled responses ("choices") to a prompt:

* **structural** — how unsure the model is about *form*: per token, the normalized entropy of
  its top-k distribution, −Σ p·log p / log k (``normalized_entropy`` of the token rows, over the
  top-k probabilities as returned), averaged over the tokens of a choice, then over the choices.
* **conceptual** — how unsure it is about *meaning*:
  ½ · mean pairwise cosine distance between the choices' embeddings
  + ½ · mean over choices of the mean cosine distance between each *partial* response (the
  choice's prefix up to a token, followed by one of that position's other top-k alternatives)
  and the full response.

Embeddings come from all-MiniLM-L6-v2 (``uq.embeddings``), batched and cached. Sampling uses
the LLM layer (``llm.generate``) with a seed per choice, so a probe is reproducible.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from itertools import combinations

import numpy as np

from agentuq_nb.uq.embeddings import Embedder, cosine_distance, default_embedder

SPARK = "▁▂▃▄▅▆▇█"


@dataclass
class Choice:
    text: str
    tokens: list[str]
    token_entropy: np.ndarray  # normalized top-k entropy per token
    token_distance: np.ndarray  # mean distance of the alternative-token partials to the full text, per token


@dataclass
class ProbeResult:
    prompt: str
    structural: float
    conceptual: float
    pairwise_distance: float
    partial_distance: float
    choices: list[Choice] = field(default_factory=list)

    def summary(self) -> str:
        lines = [f"structural uncertainty  {self.structural:.3f}", f"conceptual uncertainty  {self.conceptual:.3f}"
                 f"  (pairwise {self.pairwise_distance:.3f}, partial {self.partial_distance:.3f})"]
        for i, c in enumerate(self.choices):
            lines.append(f"[{i}] {c.text[:70]!r}")
            lines.append(f"    entropy  {sparkline(c.token_entropy)}")
            lines.append(f"    distance {sparkline(c.token_distance)}")
        return "\n".join(lines)


def sparkline(values: np.ndarray, lo: float = 0.0, hi: float | None = None) -> str:
    values = np.nan_to_num(np.asarray(values, dtype=float), nan=0.0)
    if values.size == 0:
        return ""
    hi = hi if hi is not None else max(float(values.max()), 1e-9)
    idx = np.clip(((values - lo) / max(hi - lo, 1e-9) * (len(SPARK) - 1)).round().astype(int), 0, len(SPARK) - 1)
    return "".join(SPARK[i] for i in idx)


def structural_uncertainty(choices: list[Choice]) -> float:
    per_choice = [float(np.nanmean(c.token_entropy)) for c in choices if len(c.token_entropy)]
    return float(np.mean(per_choice)) if per_choice else float("nan")


def partial_texts(tokens: list[str], topk: list[list[str]]) -> tuple[list[str], np.ndarray]:
    """(prefix + alternative) texts of one choice and the token position each belongs to."""
    texts, owner, prefix = [], [], ""
    for t, (chosen, alts) in enumerate(zip(tokens, topk)):
        for alt in alts:
            if alt != chosen:
                texts.append(prefix + alt)
                owner.append(t)
        prefix += chosen
    return texts, np.asarray(owner, dtype=int)


def conceptual_parts(texts: list[str], token_lists: list[list[str]], topk_lists: list[list[list[str]]],
                     embedder: Embedder) -> tuple[float, float, list[np.ndarray]]:
    """(mean pairwise distance, mean partial distance, per-token partial distance per choice)."""
    full = embedder.embed(texts)
    pairs = list(combinations(range(len(texts)), 2))
    pairwise = float(np.mean([cosine_distance(full[i], full[j]) for i, j in pairs])) if pairs else 0.0
    per_choice_mean, per_token = [], []
    all_partials, owners, choice_of = [], [], []
    for c, (tokens, topk) in enumerate(zip(token_lists, topk_lists)):
        p_texts, owner = partial_texts(tokens, topk)
        all_partials.extend(p_texts)
        owners.append(owner)
        choice_of.extend([c] * len(p_texts))
    emb = embedder.embed(all_partials) if all_partials else np.zeros((0, full.shape[1]))
    choice_of = np.asarray(choice_of, dtype=int)
    for c, owner in enumerate(owners):
        d = cosine_distance(emb[choice_of == c], full[c][None, :])
        per_choice_mean.append(float(d.mean()) if d.size else 0.0)
        n_tok = len(token_lists[c])
        sums = np.bincount(owner, weights=d, minlength=n_tok)
        counts = np.bincount(owner, minlength=n_tok)
        per_token.append(np.where(counts > 0, sums / np.maximum(counts, 1), np.nan))
    return pairwise, float(np.mean(per_choice_mean)) if per_choice_mean else 0.0, per_token


def watchful_uncertainty(prompt: str, texts: list[str], token_lists: list[list[str]],
                         topk_lists: list[list[list[str]]], token_entropies: list[np.ndarray],
                         embedder: Embedder) -> ProbeResult:
    """Structural and conceptual uncertainty of given choices (their texts, tokens, top-k tokens and the
    normalized top-k entropy of each token): what :func:`probe` reports for the choices it sampled, and
    what ``uq.action_uq`` reports for the actions sampled at an agent's decision point."""
    pairwise, partial, per_token = conceptual_parts(texts, token_lists, topk_lists, embedder)
    choices = [Choice(text, list(toks), np.asarray(entropy, dtype=float), dist)
               for text, toks, entropy, dist in zip(texts, token_lists, token_entropies, per_token)]
    return ProbeResult(prompt, structural_uncertainty(choices), 0.5 * pairwise + 0.5 * partial, pairwise, partial, choices)


def probe(prompt: str, n: int = 5, model: str | None = None, temperature: float = 1.0, seed: int = 0,
          max_tokens: int = 48, top_logprobs: int = 5, embedder: Embedder | None = None) -> ProbeResult:
    """Sample ``n`` responses to ``prompt`` and measure structural and conceptual uncertainty."""
    from agentuq_nb import llm

    embedder = embedder or default_embedder()
    model = model or llm.LOCAL_MODEL
    generations = [
        llm.generate([{"role": "user", "content": prompt}], model=model, temperature=temperature, seed=seed + i,
                     max_tokens=max_tokens, top_logprobs=top_logprobs)
        for i in range(n)
    ]
    texts = [g.message.get("content") or "" for g in generations]
    token_lists = [[r["token"] for r in g.tokens] for g in generations]
    topk_lists = [[list(r["topk_tokens"]) for r in g.tokens] for g in generations]
    entropies = [np.array([r["normalized_entropy"] if r["normalized_entropy"] is not None else np.nan
                           for r in g.tokens], dtype=float) for g in generations]
    return watchful_uncertainty(prompt, texts, token_lists, topk_lists, entropies, embedder)

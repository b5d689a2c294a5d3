"""Uncertainty at an agent's decision points, from K resampled next actions (``action_samples``).

:func:`action_turn_table` turns the sample rows (one per sample, :data:`ACTION_SAMPLE_SCHEMA`) into one
row per decision point and sampler with the statistics of :data:`ACTION_TURN_STATISTICS`
(``RUN_DIR/action_turns.parquet``; :func:`compute_action_turns` reads a run's samples).

**Clusters.** The action the agent took is clustered together with the K samples; a tool call and a
text reply never share a cluster.

* Tool calls: equal :func:`records.actions.action_key` (canonical name and arguments, in order) = one
  cluster. A malformed call (arguments that do not parse, or a sample flagged ``malformed``) is kept as
  its own cluster - one per distinct raw text - and counted in ``num_malformed``.
* Text replies: clustered by meaning with the bundled all-MiniLM-L6-v2 embeddings (``uq.embeddings``):
  scipy's hierarchical clustering with **complete** linkage on cosine distance, cut at
  1 − :data:`TEXT_SIMILARITY_THRESHOLD`. Complete linkage puts two replies together only when *every*
  pair of the cluster has cosine similarity ≥ the threshold (no chaining through intermediate replies),
  so a cluster is a set of mutual paraphrases under the same pairwise rule the threshold was chosen for.
  The threshold 0.75 was measured on 20 paraphrase and 20 hard non-paraphrase pairs of agent replies
  (same topic, another act: "change" vs "cancel" a flight, "charged" vs "refunded"): similarities of
  paraphrases 0.62-0.97 (median 0.82), of non-paraphrases 0.09-0.94 (median 0.69); balanced accuracy
  peaks at 0.70 on the plateau 0.70-0.775 (at 0.75: 65 % of paraphrases merged, 75 % of non-paraphrases
  split). This approximates Kuhn et al.'s bidirectional NLI entailment cheaply and offline, but
  sentence embeddings measure topical similarity: a negation or a swapped entity in an otherwise equal
  reply is often merged. Empty replies are equal to each other.

**Statistics** (entropies in nats), per decision point over its K samples:

* ``action_agreement`` - share of samples in the taken action's cluster (a confidence);
* ``action_clusters`` - number of clusters among the samples (the taken action's, when no sample is in
  it, is not counted);
* ``action_semantic_entropy`` - entropy of the clusters' sample frequencies;
* ``action_semantic_entropy_weighted`` - semantic entropy as in Farquhar et al. (Nature 2024, the
  released code of Kuhn et al.'s method): each sample weighs exp(its *length-normalized* log-likelihood,
  ``sum_logprob / num_tokens``), a cluster's probability is the normalized sum of its samples' weights
  (every sample counted, duplicates included), H = −Σ p log p. NaN unless every sample has log-probs;
* ``tool_name_entropy`` - entropy over which tool the samples call (several calls: their names joined
  by ``+``), with "no tool" and "malformed" as values of their own;
* ``structural`` / ``conceptual`` - the Watchful quantities, computed by ``uq.structural``
  (:func:`~agentuq_nb.uq.structural.watchful_uncertainty`, the probe's own code), so that on the same
  samples they equal the probe's values. Each token's normalized top-k entropy is the token table's
  (``with_token_metrics``). The text of a sample is its content for a text reply; for a tool call
  its content (if any) followed by each call as JSON ``{"name", "arguments"}`` (keys sorted), the
  same text whatever the model's call syntax. Both are NaN unless every sample of the decision point
  has log-probs with top-k tokens (the partial half of ``conceptual`` needs them); the pairwise half
  alone is always given as ``conceptual_pairwise`` (black-box), the partial half as ``conceptual_partial``.

Besides the statistics a row carries what a turn-by-turn view shows: ``taken_action`` (a short label,
e.g. ``get_order(order_id=#W123)`` or ``text: "Sure, I can…"``), ``taken_kind``, ``taken_cluster``,
``sample_clusters`` (the cluster id of each sample, by ``sample_idx``), ``cluster_labels`` and
``cluster_sizes`` (samples per cluster, by cluster id; ids in order of first appearance among the
samples, the taken action's own cluster last when no sample joined it). :func:`turn_clusters` gives
the same in long form.

Embeddings are computed in one batch for every text of the table (cached by text), so the per-decision
work only reads the cache. The partial responses are the costly part (one per token and alternative):
``conceptual_partials=False`` leaves them out (``conceptual`` and ``conceptual_partial`` NaN). Measured
(``benchmarks/measure_text_threshold.py``, shared 2-core machine): 10 decision points × K=5 × 48 tokens
with top-5 took 4 s without the partials (50 texts) and 286 s with them (7,957 partial texts).
"""
from __future__ import annotations

import json
import os
import warnings
from collections.abc import Sequence
from typing import Any

import numpy as np
import pandas as pd
import pyarrow as pa

from agentuq_nb.io.store.rundir import RunDir
from agentuq_nb.records.action_samples import ACTION_TURN_STATISTICS, DECISION_KEYS
from agentuq_nb.records.actions import TEXT_ACTION, action_key, is_malformed
from agentuq_nb.records.tokens import TOKEN_SCHEMA
from agentuq_nb.uq.embeddings import Embedder, default_embedder
from agentuq_nb.uq.structural import partial_texts, watchful_uncertainty
from agentuq_nb.uq.token_metrics import with_token_metrics

#: cosine similarity at or above which two text replies mean the same (see the module docstring)
TEXT_SIMILARITY_THRESHOLD = 0.75
#: scipy linkage method of the text clusters
TEXT_LINKAGE = "complete"
NO_TOOL, MALFORMED_TOOL = "no tool", "malformed"
LABEL_CHARS = 60

REQUIRED_COLUMNS = [*DECISION_KEYS, "message_idx", "turn_idx", "sample_idx", "sampler_model", "sampler_kind",
                    "content", "tool_calls", "malformed", "taken_content", "taken_tool_calls", "has_logprobs",
                    "tokens", "token_logprobs", "topk_tokens", "topk_logprobs", "sum_logprob", "num_tokens"]
#: extra per-decision statistics beside ACTION_TURN_STATISTICS
EXTRA_STATISTICS: dict[str, tuple[bool, str]] = {
    "conceptual_pairwise": (True, "mean pairwise cosine distance of the samples' embeddings (the black-box "
                                  "half of conceptual uncertainty)"),
    "conceptual_partial": (True, "mean distance of the partial responses to their full response (the "
                                 "top-k half of conceptual uncertainty)"),
}
GROUP_KEYS = [*DECISION_KEYS, "sampler_model"]
TURN_COLUMNS = [*DECISION_KEYS, "message_idx", "turn_idx", "k", "sampler_model", "sampler_kind",
                *ACTION_TURN_STATISTICS, *EXTRA_STATISTICS, "num_malformed", "has_logprobs", "has_topk",
                "taken_action", "taken_kind", "taken_cluster", "sample_clusters", "cluster_labels", "cluster_sizes"]


# ----------------------------------------------------------------------------- one action

def parse_tool_calls(text: Any, where: str) -> list:
    """The tool calls of a sample (JSON text of a list; empty or null = no call); a clear error otherwise."""
    if text is None or (isinstance(text, float) and np.isnan(text)) or (isinstance(text, str) and not text.strip()):
        return []
    if isinstance(text, str):
        try:
            text = json.loads(text)
        except json.JSONDecodeError as err:
            raise ValueError(f"{where}: tool_calls is not JSON text ({err}): {text[:80]!r}") from None
    if not isinstance(text, list):
        raise ValueError(f"{where}: tool_calls must be a JSON list of calls, not {type(text).__name__}")
    return text


def call_name_and_arguments(call: Any) -> tuple[str, Any]:
    fn = call.get("function") if isinstance(call, dict) and isinstance(call.get("function"), dict) else call
    if isinstance(fn, dict):
        return str(fn.get("name", "")), fn.get("arguments")
    return str(getattr(fn, "name", "")), getattr(fn, "arguments", None)


def sample_action_key(calls: list, content: str, malformed: bool) -> tuple:
    """:func:`action_key` of an action; a call flagged ``malformed`` whose arguments happened to parse (or
    that left no call) is a malformed action of its own, keyed by its raw text."""
    key = action_key(calls)
    if malformed and not is_malformed(key):
        return ("malformed", content or "", json.dumps(calls, sort_keys=True, default=str))
    return key


def action_kind(key: tuple) -> str:
    if key == TEXT_ACTION:
        return "text"
    return "malformed" if key[0] == "malformed" or is_malformed(key) else "tool_call"


def shorten(text: str, limit: int = LABEL_CHARS) -> str:
    text = " ".join(str(text).split())
    return text if len(text) <= limit else text[:limit - 1] + "…"


def action_label(calls: list, content: str, kind: str) -> str:
    """A short label: ``get_order(order_id=#W123)``, ``text: "Sure, …"``, ``malformed: get_order({"order…``."""
    if kind == "text":
        return f'text: "{shorten(content or "", LABEL_CHARS - 8)}"'
    parts = []
    for call in calls:
        name, args = call_name_and_arguments(call)
        if isinstance(args, str):
            try:
                args = json.loads(args)
            except json.JSONDecodeError:
                pass
        if isinstance(args, dict):
            shown = ", ".join(f"{k}={v if isinstance(v, str) else json.dumps(v, default=str)}" for k, v in args.items())
            parts.append(f"{name}({shown})")
        else:
            parts.append(f"{name}({args if isinstance(args, str) else json.dumps(args, default=str)})")
    label = shorten("; ".join(parts) or (content or ""))
    return f"malformed: {label}" if kind == "malformed" else label


def action_body_text(calls: list, content: str) -> str:
    """The text embedded for an action: the content, then each call as JSON (keys sorted)."""
    pieces = [content] if content else []
    for call in calls:
        name, args = call_name_and_arguments(call)
        pieces.append(json.dumps({"name": name, "arguments": args}, sort_keys=True, default=str))
    return "\n".join(pieces)


def tool_name_of(calls: list, kind: str) -> str:
    if kind == "text":
        return NO_TOOL
    if kind == "malformed":
        return MALFORMED_TOOL
    return "+".join(call_name_and_arguments(c)[0].strip() for c in calls)


# ----------------------------------------------------------------------------- clusters and entropies

def cluster_texts(embeddings: np.ndarray, threshold: float = TEXT_SIMILARITY_THRESHOLD) -> np.ndarray:
    """Cluster labels (0-based) of unit-vector embeddings: complete linkage on cosine distance, cut at
    1 − ``threshold`` (every pair of a cluster at least ``threshold`` similar)."""
    n = len(embeddings)
    if n < 2:
        return np.zeros(n, dtype=int)
    similarity = np.clip(embeddings @ embeddings.T, -1.0, 1.0)
    distance = 1.0 - similarity[np.triu_indices(n, k=1)]  # condensed form, as scipy's pdist gives
    from scipy.cluster.hierarchy import fcluster, linkage

    tree = linkage(np.maximum(distance, 0.0), method=TEXT_LINKAGE)
    return fcluster(tree, t=1.0 - threshold + 1e-9, criterion="distance") - 1


def entropy_nats(weights: Sequence[float]) -> float:
    """Entropy (nats) of the distribution proportional to ``weights`` (scipy.stats.entropy, kept ≥ 0: one
    cluster gives 0.0, not the -0.0 of a negated zero sum)."""
    from scipy.stats import entropy as scipy_entropy

    p = np.asarray(weights, dtype=float)
    return max(0.0, float(scipy_entropy(p[p > 0])))


def cluster_ids(keys: list[tuple], text_embeddings: dict[int, np.ndarray], threshold: float) -> np.ndarray:
    """Cluster ids of the actions (item 0 the taken action, then the samples): equal keys for calls,
    meaning for texts; ids in order of first appearance from item 1 on, item 0's last if it is alone."""
    raw: list[Any] = [None] * len(keys)
    text_items = [i for i, key in enumerate(keys) if key == TEXT_ACTION]
    if text_items:
        labels = cluster_texts(np.stack([text_embeddings[i] for i in text_items]), threshold)
        for i, label in zip(text_items, labels):
            raw[i] = ("text", int(label))
    for i, key in enumerate(keys):
        if key != TEXT_ACTION:
            raw[i] = key
    order = {}
    for r in raw[1:] + raw[:1]:
        order.setdefault(r, len(order))
    return np.array([order[r] for r in raw], dtype=int)


# ----------------------------------------------------------------------------- the table

def check_samples(samples: pd.DataFrame, where: str = "action samples") -> None:
    missing = [c for c in REQUIRED_COLUMNS if c not in samples.columns]
    if missing:
        raise ValueError(f"{where}: missing column(s) {', '.join(missing)} (see records.action_samples)")
    duplicated = samples.duplicated([*GROUP_KEYS, "sample_idx"])
    if duplicated.any():
        row = samples[duplicated].iloc[0]
        raise ValueError(f"{where}: sample {row['sample_idx']} of decision point "
                         f"{dict(row[DECISION_KEYS])} (sampler {row['sampler_model']}) appears twice")


def token_entropies(samples: pd.DataFrame) -> list[np.ndarray]:
    """Each sample's normalized top-k entropy per token (the token table's ``normalized_entropy``), vectorized."""
    lengths = samples["topk_logprobs"].map(lambda v: 0 if v is None else len(v)).to_numpy()
    flat_topk = [list(t) for v in samples["topk_logprobs"] if v is not None for t in v]
    flat_chosen = [float(x) for v in samples["token_logprobs"] if v is not None for x in v]
    if len(flat_chosen) != len(flat_topk):  # one chosen log-prob per top-k list, as the contract says
        flat_chosen = [np.nan] * len(flat_topk)
    raw = pa.table({"chosen_logprob": pa.array(flat_chosen, pa.float64()),
                    "topk_logprobs": pa.array(flat_topk, TOKEN_SCHEMA.field("topk_logprobs").type)})
    normalized = with_token_metrics(raw, where="action samples").column("normalized_entropy")
    normalized = normalized.to_numpy(zero_copy_only=False).astype(float) if len(flat_topk) else np.zeros(0)
    return np.split(normalized, np.cumsum(lengths)[:-1]) if len(lengths) else []


def as_list(value: Any) -> list:
    return [] if value is None else list(value)


def as_text(value: Any) -> str:
    """A content cell as text (null or NaN = empty)."""
    return value if isinstance(value, str) else ""


def action_turn_table(samples: pd.DataFrame, embedder: Embedder | None = None,
                      text_threshold: float = TEXT_SIMILARITY_THRESHOLD, conceptual_partials: bool = True) -> pd.DataFrame:
    """One row per decision point and sampler (:data:`TURN_COLUMNS`; see the module docstring).

    A decision point with fewer than 2 samples is an error (no spread to measure)."""
    embedder = embedder or default_embedder()
    check_samples(samples)
    if samples.empty:
        return pd.DataFrame({c: pd.Series(dtype=object) for c in TURN_COLUMNS})
    samples = samples.sort_values([*GROUP_KEYS, "sample_idx"], kind="stable").reset_index(drop=True)
    entropies = token_entropies(samples)
    groups = list(samples.groupby(GROUP_KEYS, sort=False, dropna=False).indices.values())

    # parse every action once; one embedding batch for every text the table needs
    parsed = []
    for i, row in enumerate(samples.itertuples(index=False)):
        where = f"sample {row.sample_idx} of {row.domain}/{row.task_id} trial {row.trial} decision {row.decision_idx}"
        calls = parse_tool_calls(row.tool_calls, where)
        key = sample_action_key(calls, as_text(row.content), bool(row.malformed))
        parsed.append((calls, key, action_kind(key), action_body_text(calls, as_text(row.content))))
    taken = []
    for rows in groups:
        first = samples.iloc[rows[0]]
        where = f"taken action of {first['domain']}/{first['task_id']} trial {first['trial']} decision {first['decision_idx']}"
        calls = parse_tool_calls(first["taken_tool_calls"], where)
        key = sample_action_key(calls, as_text(first["taken_content"]), False)
        taken.append((calls, key, action_kind(key), as_text(first["taken_content"])))
    texts = [p[3] for p in parsed]  # a text reply's body is its content
    texts += [t[3] for t in taken if t[2] == "text"]
    with_topk = samples["has_logprobs"].fillna(False).to_numpy(bool) & np.array([len(as_list(v)) > 0 for v in samples["topk_tokens"]])
    if conceptual_partials:
        for i in np.flatnonzero(with_topk):
            texts += partial_texts(as_list(samples.at[i, "tokens"]), [as_list(t) for t in samples.at[i, "topk_tokens"]])[0]
    embedder.embed(list(dict.fromkeys(texts)))  # warm the cache: the per-decision work below reads it

    out = []
    for g, rows in enumerate(groups):
        first = samples.iloc[rows[0]]
        k = len(rows)
        if k < 2:
            raise ValueError(f"decision point {dict(first[DECISION_KEYS])} (sampler {first['sampler_model']}) has "
                             f"{k} sample; at least 2 are needed to measure a spread")
        taken_calls, taken_key, taken_kind, taken_text = taken[g]
        keys = [taken_key] + [parsed[i][1] for i in rows]
        kinds = [taken_kind] + [parsed[i][2] for i in rows]
        item_texts = [taken_text] + [parsed[i][3] for i in rows]
        text_items = [j for j, kind in enumerate(kinds) if kind == "text"]
        text_emb = dict(zip(text_items, embedder.embed([item_texts[j] for j in text_items]))) if text_items else {}
        ids = cluster_ids(keys, text_emb, text_threshold)
        sample_ids = ids[1:]
        sizes = np.bincount(sample_ids, minlength=int(ids.max()) + 1)
        labels = [""] * len(sizes)
        for j in range(len(keys) - 1, -1, -1):  # the first member names its cluster
            calls, content = (taken_calls, taken_text) if j == 0 else (parsed[rows[j - 1]][0], item_texts[j])
            labels[ids[j]] = action_label(calls, content, kinds[j])
        present = sizes[sizes > 0]

        has_logprobs = bool(samples.loc[rows, "has_logprobs"].fillna(False).all())
        weighted = np.nan
        if has_logprobs:
            sums = samples.loc[rows, "sum_logprob"].to_numpy(float)
            counts = samples.loc[rows, "num_tokens"].to_numpy(float)
            if np.isfinite(sums).all() and (counts > 0).all():
                from scipy.special import logsumexp

                per_sample = sums / counts
                log_mass = np.array([logsumexp(per_sample[sample_ids == c]) for c in np.unique(sample_ids)])
                weighted = entropy_nats(np.exp(log_mass - logsumexp(log_mass)))

        body = item_texts[1:]
        has_topk = bool(with_topk[rows].all())
        tokens = [as_list(samples.at[i, "tokens"]) if has_topk else [] for i in rows]
        topk = [[as_list(t) for t in as_list(samples.at[i, "topk_tokens"])] if has_topk and conceptual_partials else
                [[]] * len(tokens[n]) for n, i in enumerate(rows)]
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", RuntimeWarning)  # a sample without a finite token entropy: NaN
            watchful = watchful_uncertainty("", body, tokens, topk, [entropies[i] for i in rows], embedder)
        structural = watchful.structural if has_topk else np.nan
        partial = watchful.partial_distance if has_topk and conceptual_partials else np.nan

        names = [tool_name_of(parsed[i][0], parsed[i][2]) for i in rows]
        out.append({
            **{c: first[c] for c in DECISION_KEYS}, "message_idx": first["message_idx"], "turn_idx": first["turn_idx"],
            "k": k, "sampler_model": first["sampler_model"], "sampler_kind": first["sampler_kind"],
            "action_agreement": float(np.mean(sample_ids == ids[0])),
            "action_clusters": int(len(present)),
            "action_semantic_entropy": entropy_nats(present),
            "action_semantic_entropy_weighted": weighted,
            "tool_name_entropy": entropy_nats(pd.Series(names).value_counts().to_numpy()),
            "structural": structural,
            "conceptual": 0.5 * watchful.pairwise_distance + 0.5 * partial,
            "conceptual_pairwise": watchful.pairwise_distance,
            "conceptual_partial": partial,
            "num_malformed": int(sum(kind == "malformed" for kind in kinds[1:])),
            "has_logprobs": has_logprobs, "has_topk": has_topk,
            "taken_action": labels[ids[0]], "taken_kind": taken_kind, "taken_cluster": int(ids[0]),
            "sample_clusters": sample_ids.tolist(), "cluster_labels": labels, "cluster_sizes": sizes.tolist(),
        })
    table = pd.DataFrame(out, columns=TURN_COLUMNS)
    for c in ("trial", "seed", "decision_idx", "message_idx", "turn_idx", "k", "action_clusters", "num_malformed",
              "taken_cluster"):
        table[c] = table[c].astype("int64")
    return table


def turn_clusters(turns: pd.DataFrame) -> pd.DataFrame:
    """The clusters of each decision point in long form: keys, ``cluster``, ``label``, ``samples`` (how
    many of the K), ``share``, ``taken`` (the agent's action is in it)."""
    rows = turns[[*DECISION_KEYS, "sampler_model", "k", "taken_cluster", "cluster_labels", "cluster_sizes"]].copy()
    rows["cluster"] = rows["cluster_sizes"].map(lambda sizes: list(range(len(sizes))))
    long = rows.explode(["cluster", "cluster_labels", "cluster_sizes"], ignore_index=True)
    long = long.rename(columns={"cluster_labels": "label", "cluster_sizes": "samples"})
    long["cluster"] = long["cluster"].astype("int64")
    long["samples"] = long["samples"].astype("int64")
    long["share"] = long["samples"] / long["k"]
    long["taken"] = long["cluster"] == long["taken_cluster"]
    return long.drop(columns=["taken_cluster"])


def saturation(turns: pd.DataFrame) -> dict:
    """How often the K samples of a decision point are spread as far as K allows (rows of ``action_turns``):
    ``all_distinct`` points where every sample is a cluster of its own (``action_clusters == k``: the semantic
    entropy is at its maximum log K), ``no_agreement`` points where no sample joined the agent's action
    (``action_agreement == 0``), ``taken_malformed`` points whose taken action is a malformed call, their shares of
    ``points``, the median clusters and the mean agreement. When most points are at the maximum for successes and
    failures alike, the estimators built on them cannot tell the two apart."""
    n = len(turns)
    if n == 0:
        return {"points": 0, "all_distinct": 0, "no_agreement": 0, "taken_malformed": 0, "share_all_distinct": np.nan,
                "share_no_agreement": np.nan, "median_clusters": np.nan, "mean_agreement": np.nan}
    distinct = int((turns["action_clusters"] >= turns["k"]).sum())
    none = int((turns["action_agreement"] == 0).sum())
    return {"points": n, "all_distinct": distinct, "no_agreement": none,
            "taken_malformed": int(turns["taken_kind"].eq("malformed").sum()) if "taken_kind" in turns else 0,
            "share_all_distinct": distinct / n, "share_no_agreement": none / n,
            "median_clusters": float(turns["action_clusters"].median()),
            "mean_agreement": float(turns["action_agreement"].mean())}


def trajectory_decisions(turns: pd.DataFrame, rewards: pd.DataFrame, task_id: str | None = None) -> pd.DataFrame:
    """One trajectory's rows of ``turns`` with its ``reward`` (from ``rewards``: keys + reward), for a turn-by-turn
    view: task ``task_id``'s (its first trial), else a lowest-reward trajectory whose taken actions are all
    well-formed (none ``malformed``: a malformed call is a cluster of its own that no sample joins, which shows
    nothing of the method), with the most decision points, preferring one where some sample agrees with the agent;
    when every trajectory has a malformed taken action, the same order over all of them."""
    keys = ["domain", "task_id", "trial", "seed"]
    rows = turns.merge(rewards[[*keys, "reward"]], on=keys, how="left")
    if rows.empty:
        raise ValueError("no decision point to show")
    if task_id is None:
        marks = rows.assign(
            malformed=rows["taken_kind"].eq("malformed") if "taken_kind" in rows else False,
            agreed=rows["action_agreement"].gt(0) if "action_agreement" in rows else False)
        sizes = marks.groupby(keys, dropna=False).agg(n=("decision_idx", "size"), reward=("reward", "first"),
                                                      malformed=("malformed", "any"), agreed=("agreed", "any"))
        well_formed = sizes[~sizes["malformed"]]
        pool = well_formed if len(well_formed) else sizes
        chosen = pool.sort_values(["reward", "agreed", "n"], ascending=[True, False, False], kind="stable").index[0]
    else:
        matching = rows[rows["task_id"] == str(task_id)]
        if matching.empty:
            raise ValueError(f"task {task_id!r} has no decision point in this run")
        chosen = tuple(matching[keys].iloc[0])
    return rows[(rows[keys].apply(tuple, axis=1) == tuple(chosen))].sort_values("decision_idx")


def compute_action_turns(run: RunDir | str | os.PathLike, embedder: Embedder | None = None,
                         text_threshold: float = TEXT_SIMILARITY_THRESHOLD, conceptual_partials: bool = True) -> pd.DataFrame:
    """:func:`action_turn_table` of a run's ``action_samples.parquet`` (not written: the caller commits it)."""
    run = RunDir.of(run)
    samples = run.read_frame("action_samples")
    try:
        return action_turn_table(samples, embedder, text_threshold, conceptual_partials)
    except ValueError as err:
        raise ValueError(f"{run.file('action_samples')}: {err}") from None

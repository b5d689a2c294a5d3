"""The learned failure detector's model: P(failure | trajectory) from its features
(:mod:`agentuq_nb.uq.detector_features`), fitted on training rows only, read back from plain arrays.

**What is fitted, on the training rows alone.** The text group: the terms seen in at least ``min_df`` training
trajectories of at least ``min_tasks`` tasks (a term of one task only - its user's name, a reservation's cities - says
which task a trajectory is, which task-disjoint protocols show to be leakage, not a failure signal), the ``max_terms``
most frequent of them, weighed by TF-IDF (scikit-learn's ``TfidfTransformer``,
sublinear term frequency, rows L2-normalized) with the training rows' IDF. The dense groups (black-box signals,
embeddings, length): missing values imputed by the training medians. Then one of :data:`MODELS`:

* ``logistic`` - L2-regularized logistic regression on every column standardized by the training rows (the text
  columns scaled, not centred, so that a sparse row stays sparse and an absent term counts 0; a standardized value
  clipped to ±:data:`MAX_Z`, so that a column nearly constant in training cannot blow a new run up); its inverse
  regularization ``C`` is chosen among :data:`~agentuq_nb.evaluation.combined_predictor.C_GRID` by
  ``LogisticRegressionCV`` over inner folds by task of the training rows (:func:`inner_folds`; by the AUROC, the
  metric the detector is judged by - its probabilities are recalibrated afterwards; the vocabulary,
  IDF, medians and scales of the inner folds are the training rows', which never touch the evaluated rows).
* ``gbm`` - scikit-learn's ``HistGradientBoostingClassifier`` on the dense columns as they are (it takes missing values)
  and, with the text group, the text's first components (``TruncatedSVD`` of the training TF-IDF, at most
  :data:`SVD_COMPONENTS`); depth and learning rate chosen among
  :data:`~agentuq_nb.evaluation.combined_predictor.GBM_GRID` by ``GridSearchCV`` over the same inner folds.

With one class among the training rows the detector predicts that class's rate (a constant).

**Contributions** (:meth:`FittedDetector.contributions`), what a prediction is made of, on the log-odds scale:

* logistic: coefficient × the standardized value the model sees; an embedding block's dimensions are summed into one
  contribution per block. The intercept plus all contributions is the model's log-odds, exactly;
* gbm: occlusion - the log-odds minus the log-odds with the feature (an embedding block, or the whole text) set to its
  training median; the effect of changing one input with the others held, which does not add up to the log-odds
  (interactions), said so wherever it is shown.

**Arrays, never pickle** (:meth:`FittedDetector.to_arrays`, :meth:`FittedDetector.from_arrays`): the fitted state is a
JSON-able description and numeric arrays (and the terms as a unicode array); reading it back rebuilds scikit-learn's
``TfidfTransformer`` and, for the GBM, the trees as scikit-learn's own ``TreePredictor`` over their node records
(their dtype checked against the installed scikit-learn's), so nothing from a detector folder is executed.
"""
from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field, replace
from typing import TYPE_CHECKING, Annotated, Any, Optional

import numpy as np
import pandas as pd
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from agentuq_nb.evaluation.calibration import one_thread
from agentuq_nb.evaluation.combined_predictor import C_GRID, GBM_FIXED, GBM_GRID, new_cv_args
from agentuq_nb.evaluation.defaults import DETECTOR_MAX_TERMS, DETECTOR_MIN_DF, DETECTOR_MIN_TASKS
from agentuq_nb.uq.detector_features import GROUPS, TrajectoryFeatures, block_of, check_groups

if TYPE_CHECKING:  # scipy and sklearn are imported where a model is fitted or a matrix made (~1 s a process)
    import scipy.sparse as sp

MODELS = ("logistic", "gbm")
#: the text's components the GBM sees (TruncatedSVD of the TF-IDF)
SVD_COMPONENTS = 32
#: how each model's contributions are made (the predictions' files say it)
CONTRIBUTIONS = {
    "logistic": "coefficient x standardized value on the log-odds scale (an embedding block summed over its "
                "dimensions); the intercept plus all contributions is the log-odds",
    "gbm": "occlusion: log-odds minus log-odds with the feature set to its training median (an embedding block, or "
           "the whole text, at once); they do not add up to the log-odds",
}
TEXT_BLOCK = "text"
#: standardized values are clipped to ±MAX_Z: a column nearly constant in training (a rare term, an embedding
#: dimension) cannot blow a new run's log-odds up
MAX_Z = 10.0
#: a column whose training standard deviation is below this is taken as constant (scaled by 1)
MIN_SCALE = 1e-6
#: what the inner folds choose the hyperparameters by: the AUROC (each inner fold's, averaged) - the detector is judged
#: by how it ranks trajectories, and its probabilities are recalibrated on held-out runs afterwards
INNER_SCORING = "roc_auc"


@dataclass(frozen=True)
class DetectorSettings:
    """What a detector is: its feature groups, its model, and the text vocabulary's bounds."""

    groups: tuple[str, ...] = GROUPS
    model: str = "logistic"
    max_terms: int = DETECTOR_MAX_TERMS
    min_df: int = DETECTOR_MIN_DF
    min_tasks: int = DETECTOR_MIN_TASKS
    inner_splits: int = 3
    seed: int = 0
    #: fit the logistic model within runs (an intercept per training run, :func:`run_indicators`): the protocols judge
    #: how a detector ranks the trajectories of one run, and pooled rows teach which run is long or fails often
    within_runs: bool = True

    def __post_init__(self) -> None:
        object.__setattr__(self, "groups", check_groups(self.groups))
        if self.model not in MODELS:
            raise ValueError(f"model must be one of {', '.join(MODELS)}, not {self.model!r}")
        if self.max_terms < 1 or self.min_df < 1 or self.min_tasks < 1 or self.inner_splits < 2:
            raise ValueError("max_terms, min_df and min_tasks must be >= 1 and inner_splits >= 2")

    def as_dict(self) -> dict[str, Any]:
        out = asdict(self)
        out["groups"] = list(self.groups)
        return out


#: the last vocabulary seen by :func:`term_columns`, its length and its lookup (an index of its terms)
_last_lookup: tuple[list[str], int, pd.Index | dict[str, int]] | None = None


def term_columns(vocabulary: list[str], terms: list[str]) -> np.ndarray:
    """Each term's column in ``vocabulary`` (-1 where it lacks the term). The lookup of the last vocabulary is kept:
    the folds and inner folds of a training take their rows from one :class:`TrajectoryFeatures` and share its
    vocabulary list (tens of thousands of terms: rebuilding a map of it for each of the ~1,600 design matrices, and
    looking the terms up one by one, was a fifth of the model selection's time)."""
    global _last_lookup
    last = _last_lookup
    if last is not None and last[0] is vocabulary and last[1] == len(vocabulary):
        lookup = last[2]
    else:
        index = pd.Index(vocabulary, dtype=object)
        lookup = index if index.is_unique else {t: i for i, t in enumerate(vocabulary)}  # a repeat: its last column
        _last_lookup = (vocabulary, len(vocabulary), lookup)
    if isinstance(lookup, pd.Index):
        return lookup.get_indexer(pd.Index(terms, dtype=object)).astype(np.int64)
    return np.array([lookup.get(t, -1) for t in terms], dtype=np.int64)


#: the last vocabulary seen by :func:`term_order`, its length and each term's place in the sorted terms
_last_order: tuple[list[str], int, np.ndarray] | None = None


def term_order(vocabulary: list[str]) -> np.ndarray:
    """Each term's place when ``vocabulary`` is sorted (ties by position): what :func:`fit_text` breaks ties of
    frequency by, as integers - sorting the strings themselves for each of the model selection's ~600 vocabularies
    took a fifth of its time. Kept for the last vocabulary, as :func:`term_columns`' lookup."""
    global _last_order
    last = _last_order
    if last is not None and last[0] is vocabulary and last[1] == len(vocabulary):
        return last[2]
    order = np.empty(len(vocabulary), dtype=np.int64)
    order[np.argsort(np.array(vocabulary, dtype=object), kind="stable")] = np.arange(len(vocabulary))
    _last_order = (vocabulary, len(vocabulary), order)
    return order


def term_matrix(features: TrajectoryFeatures, terms: list[str]) -> sp.csr_matrix:
    """The counts of ``terms`` (columns, in that order) in ``features`` (a term it lacks counts 0)."""
    import scipy.sparse as sp

    n = len(features)
    if features.counts is None or not terms:
        return sp.csr_matrix((n, len(terms)))
    source = term_columns(features.vocabulary, terms)
    present = np.flatnonzero(source >= 0)
    select = sp.csr_matrix((np.ones(len(present)), (source[present], present)),
                           shape=(features.counts.shape[1], len(terms)))
    return (features.counts.astype(float) @ select).tocsr()


#: rows of a dense block turned into CSR at once by :func:`csr_beside` (bounds its temporaries to a few MB)
CSR_CHUNK_ROWS = 2048


def csr_beside(text: sp.csr_matrix, block: Callable[[int, int], np.ndarray], k: int) -> sp.csr_matrix:
    """``sp.hstack([text, sp.csr_matrix(dense)], format="csr")`` for the dense block ``dense`` of ``k`` columns whose
    rows ``a:b`` are ``block(a, b)`` - the same data, indices and order within each row (the text's entries as stored,
    then the dense block's nonzeros by column), so a fit on it gives the same floats - built straight into its arrays
    from :data:`CSR_CHUNK_ROWS` rows of the dense block at a time (each made twice: once counted, once copied), never
    the whole block: scipy's way holds it dense, then as COO (24 bytes an entry), then as two CSR copies (12 bytes
    each), which made most of train-detector's memory (issue 51)."""
    import scipy.sparse as sp

    text = text.tocsr()
    n, n_text = text.shape
    chunks = [(a, min(a + CSR_CHUNK_ROWS, n)) for a in range(0, n, CSR_CHUNK_ROWS)]
    text_counts = np.diff(text.indptr).astype(np.int64)
    counts = text_counts.copy()
    for a, b in chunks:
        counts[a:b] += np.count_nonzero(block(a, b), axis=1)
    nnz = int(counts.sum())
    index_dtype = np.int32 if max(nnz, n_text + k) < np.iinfo(np.int32).max else np.int64
    indptr = np.zeros(n + 1, dtype=index_dtype)
    np.cumsum(counts, out=indptr[1:])
    data = np.empty(nnz, dtype=np.float64)
    indices = np.empty(nnz, dtype=index_dtype)
    for a, b in chunks:
        lo, hi = int(indptr[a]), int(indptr[b])
        rows = np.repeat(np.arange(a, b), text_counts[a:b])
        t_lo, t_hi = int(text.indptr[a]), int(text.indptr[b])
        at = indptr[rows].astype(np.int64) - lo + (np.arange(t_lo, t_hi) - text.indptr[rows])  # each text entry's slot
        is_dense = np.ones(hi - lo, dtype=bool)
        is_dense[at] = False
        part_data, part_indices = data[lo:hi], indices[lo:hi]  # views: written through
        part_data[at] = text.data[t_lo:t_hi]
        part_indices[at] = text.indices[t_lo:t_hi]
        values = block(a, b)
        nonzero = values != 0
        part_data[is_dense] = values[nonzero]
        part_indices[is_dense] = np.nonzero(nonzero)[1] + n_text
    return sp.csr_matrix((data, indices, indptr), shape=(n, n_text + k))


@dataclass
class FittedDetector:
    """A fitted detector (see the module docstring): the fitted state, and what it computes from features."""

    settings: DetectorSettings
    terms: list[str] = field(default_factory=list)
    idf: np.ndarray | None = None
    dense_names: list[str] = field(default_factory=list)
    median: np.ndarray | None = None  # dense columns' training medians
    mean: np.ndarray | None = None  # logistic: the standardization of every column (text first, then dense)
    scale: np.ndarray | None = None
    coef: np.ndarray | None = None
    intercept: float = 0.0
    C: float | None = None
    constant: float | None = None  # the training rows held one class: this log-odds for every row
    svd: np.ndarray | None = None  # gbm: (components, terms)
    occlusion: np.ndarray | None = None  # gbm: each input's training median (what an occluded input is set to)
    trees: list[Any] = field(default_factory=list)  # gbm: scikit-learn TreePredictors
    gbm_params: dict[str, Any] = field(default_factory=dict)
    n_train: int = 0
    n_failures: int = 0

    # ------------------------------------------------------------------ design matrices
    def text_tfidf(self, features: TrajectoryFeatures) -> sp.csr_matrix:
        from sklearn.feature_extraction.text import TfidfTransformer

        transformer = TfidfTransformer(sublinear_tf=True)
        counts = term_matrix(features, self.terms)
        if not self.terms:
            return counts
        transformer.idf_ = self.idf
        return transformer.transform(counts).tocsr()

    def dense_values(self, features: TrajectoryFeatures, impute: bool, rows: slice = slice(None)) -> np.ndarray:
        """The detector's dense columns of ``features``' ``rows`` (a copy), missing values imputed by the training
        medians (``impute``) or NaN."""
        if not self.dense_names:
            return np.zeros((len(range(len(features))[rows]), 0))
        have = {name: i for i, name in enumerate(features.dense_names)}
        missing = [n for n in self.dense_names if n not in have]
        if missing:
            raise ValueError(f"the features lack the detector's column(s) {missing[:3]}: extract the groups it was "
                             "trained on")
        X = features.dense[rows][:, [have[n] for n in self.dense_names]].astype(float, copy=False)  # a copy
        np.copyto(X, self.median[None, :] if impute else np.nan, where=~np.isfinite(X))  # in place: one copy in all
        return X

    def design(self, features: TrajectoryFeatures, tfidf: sp.csr_matrix | None = None) -> sp.csr_matrix | np.ndarray:
        """The matrix the model reads: standardized text | dense (logistic), text components | raw dense (gbm);
        ``tfidf``: :meth:`text_tfidf` of ``features`` when the caller has it already (logistic)."""
        import scipy.sparse as sp

        if self.settings.model == "logistic":
            n_text = len(self.terms)
            text = ((self.text_tfidf(features) if tfidf is None else tfidf) @ sp.diags(1.0 / self.scale[:n_text])
                    ).tocsr()
            del tfidf
            np.minimum(text.data, MAX_Z, out=text.data)

            def standardized(a: int, b: int) -> np.ndarray:  # rows a:b, in place: the floats of (x - mean) / scale
                dense = self.dense_values(features, impute=True, rows=slice(a, b))
                dense -= self.mean[n_text:]
                dense /= self.scale[n_text:]
                return np.clip(dense, -MAX_Z, MAX_Z, out=dense)

            return csr_beside(text, standardized, len(self.dense_names))
        parts = []
        if self.svd is not None:
            parts.append(np.asarray(self.text_tfidf(features) @ self.svd.T))
        parts.append(self.dense_values(features, impute=False))
        return np.hstack(parts)

    def feature_names(self) -> list[str]:
        """The names of the design matrix's columns."""
        if self.settings.model == "logistic":
            return [f"text:{t}" for t in self.terms] + list(self.dense_names)
        svd = [f"{TEXT_BLOCK}:svd{i}" for i in range(0 if self.svd is None else len(self.svd))]
        return svd + list(self.dense_names)

    # ------------------------------------------------------------------ predictions
    def raw_log_odds(self, X) -> np.ndarray:
        n = X.shape[0]
        if self.constant is not None:
            return np.full(n, self.constant)
        if self.settings.model == "logistic":
            return np.asarray(X @ self.coef).ravel() + self.intercept
        out = np.full(n, self.intercept)
        if self.trees:
            X = np.ascontiguousarray(X, dtype=np.float64)
            bitsets = np.zeros((0, 8), dtype=np.uint32)
            f_idx = np.zeros(X.shape[1], dtype=np.uint32)
            for tree in self.trees:
                out += tree.predict(X, known_cat_bitsets=bitsets, f_idx_map=f_idx, n_threads=1)
        return out

    def log_odds(self, features: TrajectoryFeatures) -> np.ndarray:
        """The model's log-odds of failure (before calibration) for every row of ``features``."""
        if self.constant is not None:
            return np.full(len(features), self.constant)
        return self.raw_log_odds(self.design(features))

    def probability(self, features: TrajectoryFeatures) -> np.ndarray:
        """The model's own probability (uncalibrated: the detector folder's calibrator maps the log-odds)."""
        return 1.0 / (1.0 + np.exp(-self.log_odds(features)))

    def block_contributions(self, features: TrajectoryFeatures) -> tuple[list[str], np.ndarray]:
        """``(names, values)``: every row's contribution of each reported feature (a term, a black-box or length column,
        an embedding block; for the GBM the whole text as one) - (rows, features), see the module docstring. No
        column for a constant detector."""
        import scipy.sparse as sp

        if self.constant is not None or len(features) == 0:
            return [], np.zeros((len(features), 0))
        X = self.design(features)
        names = self.feature_names()
        blocks = pd.Index([TEXT_BLOCK if name.startswith(f"{TEXT_BLOCK}:svd") else block_of(name) for name in names])
        codes, block_names = pd.factorize(blocks)
        if self.settings.model == "logistic":
            per_column = sp.csr_matrix(X).multiply(self.coef[None, :]).tocsr()
            group = sp.csr_matrix((np.ones(len(names)), (np.arange(len(names)), codes)),
                                  shape=(len(names), len(block_names)))
            return list(block_names), np.asarray((per_column @ group).todense())
        base = self.raw_log_odds(X)
        values = np.zeros((X.shape[0], len(block_names)))
        for b in range(len(block_names)):
            cols = np.flatnonzero(codes == b)
            occluded = np.array(X, dtype=float, copy=True)
            occluded[:, cols] = self.occlusion[cols]
            values[:, b] = base - self.raw_log_odds(occluded)
        return list(block_names), values

    def contributions(self, features: TrajectoryFeatures, top: int = 5) -> pd.DataFrame:
        """The ``top`` contributions of each row (:meth:`block_contributions`): ``row, rank, feature, contribution,
        value`` (:meth:`raw_values`), ``rank`` 1 = the largest in absolute value; a zero contribution is left out.
        Empty for a constant detector."""
        names, values = self.block_contributions(features)
        if not names:
            return pd.DataFrame(columns=["row", "rank", "feature", "contribution", "value"])
        k = min(top, values.shape[1])
        order = np.argsort(-np.abs(values), axis=1, kind="stable")[:, :k]
        rows = np.repeat(np.arange(values.shape[0]), k)
        picked = order.ravel()
        raw = self.raw_values(features, names)
        out = pd.DataFrame({"row": rows, "rank": np.tile(np.arange(1, k + 1), values.shape[0]),
                            "feature": np.asarray(names, dtype=object)[picked], "contribution": values[rows, picked],
                            "value": raw[rows, picked]})
        return out[out["contribution"] != 0].reset_index(drop=True)

    def raw_values(self, features: TrajectoryFeatures, names: list[str]) -> np.ndarray:
        """(rows, names): each reported feature's value as the trajectory has it - a term's count, a black-box or
        length column's value (length as ``log(1 + n)``, NaN where missing) - NaN for an embedding block or the GBM's
        whole text."""
        out = np.full((len(features), len(names)), np.nan)
        terms = [n.removeprefix("text:") for n in names if n.startswith("text:")]
        if terms:
            counts = term_matrix(features, terms).toarray()
            at = [i for i, n in enumerate(names) if n.startswith("text:")]
            out[:, at] = counts
        have = {name: i for i, name in enumerate(features.dense_names)}
        for i, name in enumerate(names):
            if name in have:
                out[:, i] = features.dense[:, have[name]]
        return out

    def feature_summary(self, features: TrajectoryFeatures) -> pd.DataFrame:
        """What the detector leans on over ``features``' rows (its training rows, say): per reported feature the mean
        absolute contribution (the order), the mean contribution, the share of rows where it contributes, and for the
        logistic model's single columns ``per_sd``: the change of the log-odds per standard deviation of the feature
        (its coefficient on the standardized scale; the sign says the direction - a centred column's mean contribution
        is 0 by construction, so it cannot). An embedding block, or any GBM input, has no ``per_sd``."""
        names, values = self.block_contributions(features)
        per_sd = dict(zip(self.feature_names(), self.coef)) if self.settings.model == "logistic" and \
            self.constant is None else {}
        out = pd.DataFrame({"feature": names, "mean_abs_contribution": np.abs(values).mean(axis=0) if len(values) else
                            np.nan, "mean_contribution": values.mean(axis=0) if len(values) else np.nan,
                            "share_of_rows": (values != 0).mean(axis=0) if len(values) else np.nan,
                            "per_sd": [per_sd.get(name, np.nan) for name in names]})
        return out.sort_values("mean_abs_contribution", ascending=False, kind="stable").reset_index(drop=True)

    # ------------------------------------------------------------------ arrays, never pickle
    def to_arrays(self) -> tuple[dict[str, Any], dict[str, np.ndarray]]:
        """``(description, arrays)``: a JSON-able description and numeric (and unicode) arrays that
        :meth:`from_arrays` rebuilds the detector from."""
        meta = {"settings": self.settings.as_dict(), "dense_names": list(self.dense_names),
                "intercept": float(self.intercept), "C": self.C, "constant": self.constant,
                "gbm_params": self.gbm_params, "n_train": int(self.n_train), "n_failures": int(self.n_failures),
                "n_trees": len(self.trees)}
        arrays: dict[str, np.ndarray] = {"terms": np.array(self.terms, dtype=str)}
        for name in ("idf", "median", "mean", "scale", "coef", "svd", "occlusion"):
            value = getattr(self, name)
            if value is not None:
                arrays[name] = np.asarray(value, dtype=np.float64)
        if self.trees:
            arrays["tree_nodes"] = np.concatenate([t.nodes for t in self.trees])
            arrays["tree_sizes"] = np.array([len(t.nodes) for t in self.trees], dtype=np.int64)
        return meta, arrays

    @classmethod
    def from_arrays(cls, meta: dict[str, Any], arrays: dict[str, np.ndarray]) -> "FittedDetector":
        """The detector :meth:`to_arrays` described, checked as the untrusted input it is before anything is
        converted or computed: the description's fields (:class:`StateDescription`), every array's dtype and shape
        (what the description and the other arrays imply), every number finite and within :data:`MAX_PARAMETER`,
        the trees acyclic (each inner node's children after it, so a traversal ends within the tree's size) and
        scikit-learn's records. A failure is a :class:`StateError` naming the field."""
        desc = StateDescription.check(meta)
        try:
            settings = DetectorSettings(**{**desc.settings, "groups": tuple(desc.settings.get("groups", GROUPS))})
        except (TypeError, ValueError) as err:
            raise StateError("description", "settings", str(err)) from None
        terms_array = state_array(arrays, "terms", "U", 1, required=False)
        terms = [] if terms_array is None else terms_array.tolist()
        out = cls(settings, terms=terms, dense_names=list(desc.dense_names), intercept=desc.intercept, C=desc.C,
                  constant=desc.constant, gbm_params=dict(desc.gbm_params or {}), n_train=desc.n_train,
                  n_failures=desc.n_failures)
        n_text, n_dense = len(terms), len(out.dense_names)
        fitted = out.constant is None
        expect = {"idf": (n_text,) if n_text else None, "median": (n_dense,)}
        if settings.model == "logistic" and fitted:
            expect.update(mean=(n_text + n_dense,), scale=(n_text + n_dense,), coef=(n_text + n_dense,))
        for name in ("idf", "median", "mean", "scale", "coef", "svd", "occlusion"):
            value = state_array(arrays, name, "f", 2 if name == "svd" else 1, required=expect.get(name) is not None)
            if value is None:
                continue
            if name in expect and expect[name] is not None and value.shape != expect[name]:
                raise StateError("arrays", name, f"has shape {value.shape}, expected {expect[name]}")
            setattr(out, name, value)
        if out.svd is not None and (out.svd.shape[1] != n_text or not 1 <= out.svd.shape[0] <= SVD_COMPONENTS):
            raise StateError("arrays", "svd", f"has shape {out.svd.shape} for {n_text} terms (at most "
                                              f"{SVD_COMPONENTS} components)")
        n_inputs = (0 if out.svd is None else len(out.svd)) + n_dense
        if settings.model == "gbm" and fitted and (out.occlusion is None or out.occlusion.shape != (n_inputs,)):
            found = None if out.occlusion is None else out.occlusion.shape
            raise StateError("arrays", "occlusion", f"has shape {found}, expected ({n_inputs},)")
        if out.idf is not None and (out.idf <= 0).any():
            raise StateError("arrays", "idf", "holds a weight that is not positive (an IDF is at least 1)")
        if out.scale is not None and (out.scale <= 0).any():
            raise StateError("arrays", "scale", "holds a scale that is not positive")
        if desc.n_trees and settings.model == "gbm" and fitted:
            out.trees = rebuilt_trees(arrays, desc.n_trees, n_inputs)
        return out


#: the bound on every number of a fitted state (coefficients, intercepts, leaf values, calibration slopes, scales,
#: medians): far past what a fit makes - standardized inputs are clipped to ±MAX_Z - so only an edited detector meets it,
#: and a log-odds stays a number rather than overflowing to a certainty
MAX_PARAMETER = 1e6
FiniteParameter = Annotated[float, Field(allow_inf_nan=False, ge=-MAX_PARAMETER, le=MAX_PARAMETER)]


class StateError(ValueError):
    """A fitted state that is not a detector's: ``part`` is ``description`` (the JSON of :meth:`to_arrays`) or
    ``arrays``; the message names the ``field``."""

    def __init__(self, part: str, field_name: str, what: str):
        self.part, self.field_name = part, field_name
        super().__init__(f"{field_name}: {what}")


def first_error(err: ValidationError) -> tuple[str, str]:
    """``(field, message)`` of a pydantic error's first entry, as one line."""
    first = err.errors()[0]
    return ".".join(str(part) for part in first["loc"]) or "(the whole)", first["msg"]


class Description(BaseModel):
    """A model's description as read back from a detector folder (fields it does not know are ignored); :meth:`check`
    says a bad field as a :class:`StateError` of the description."""

    model_config = ConfigDict(extra="ignore")

    @classmethod
    def check(cls, meta: Any):
        try:
            return cls.model_validate(meta)
        except ValidationError as err:
            raise StateError("description", *first_error(err)) from None


class StateDescription(Description):
    """The description :meth:`FittedDetector.to_arrays` writes, as read back."""

    settings: dict[str, Any]
    dense_names: list[str]
    intercept: FiniteParameter
    C: Optional[Annotated[float, Field(allow_inf_nan=False, gt=0, le=MAX_PARAMETER)]] = None
    constant: Optional[FiniteParameter] = None
    gbm_params: Optional[dict[str, Any]] = None
    n_train: int = Field(0, ge=0)
    n_failures: int = Field(0, ge=0)
    n_trees: int = Field(0, ge=0)



def state_array(arrays: dict[str, np.ndarray], name: str, kind: str, ndim: int, required: bool) -> np.ndarray | None:
    """``arrays[name]`` when its dtype is ``kind`` (``f``: float64, finite, within :data:`MAX_PARAMETER`; ``U``: text;
    ``i``: a signed integer) with ``ndim`` dimensions; None when absent and not ``required``. Checked before any
    conversion."""
    if name not in arrays:
        if required:
            raise StateError("arrays", name, "is missing")
        return None
    value = arrays[name]
    wanted = {"f": value.dtype == np.float64, "U": value.dtype.kind == "U", "i": value.dtype.kind == "i"}[kind]
    if not wanted or value.ndim != ndim:
        what = {"f": "float64", "U": "text", "i": "integers"}[kind]
        raise StateError("arrays", name, f"is {value.dtype} of {value.ndim} dimension(s), not {what} of {ndim}")
    if kind == "f" and value.size and not (np.isfinite(value).all() and np.abs(value).max() <= MAX_PARAMETER):
        raise StateError("arrays", name, f"holds a value that is not a finite number within ±{MAX_PARAMETER:g}")
    return value


def rebuilt_trees(arrays: dict[str, np.ndarray], n_trees: int, n_inputs: int) -> list[Any]:
    """The GBM's trees as scikit-learn's ``TreePredictor`` over their checked node records: scikit-learn's record
    dtype, each inner node's children after it (acyclic: a traversal ends within the tree's size) and its input one the
    model has, no categorical split, every leaf value finite and bounded."""
    from sklearn.ensemble._hist_gradient_boosting.common import PREDICTOR_RECORD_DTYPE
    from sklearn.ensemble._hist_gradient_boosting.predictor import TreePredictor

    if "tree_nodes" not in arrays or "tree_sizes" not in arrays:
        raise StateError("arrays", "tree_nodes", f"is missing for the {n_trees} trees the description counts")
    nodes, sizes = arrays["tree_nodes"], arrays["tree_sizes"]
    if nodes.dtype != PREDICTOR_RECORD_DTYPE or nodes.ndim != 1:
        raise StateError("arrays", "tree_nodes", "are not this scikit-learn's tree records (another version wrote them)")
    if sizes.dtype.kind != "i" or sizes.ndim != 1 or len(sizes) != n_trees or (sizes < 1).any() \
            or (sizes > len(nodes)).any() or int(sizes.sum()) != len(nodes):
        raise StateError("arrays", "tree_sizes", f"do not add up to the {len(nodes)} tree records in {n_trees} trees")
    values = nodes["value"]
    if not (np.isfinite(values).all() and np.abs(values).max(initial=0) <= MAX_PARAMETER):
        raise StateError("arrays", "tree_nodes", f"hold a leaf value that is not a finite number within "
                                                 f"±{MAX_PARAMETER:g}")
    trees = []
    for t, part in enumerate(np.split(nodes, np.cumsum(sizes)[:-1])):
        inner = ~part["is_leaf"].astype(bool)
        at = np.flatnonzero(inner)
        left, right = part["left"][inner].astype(np.int64), part["right"][inner].astype(np.int64)
        if ((left <= at) | (right <= at) | (left >= len(part)) | (right >= len(part))).any():
            raise StateError("arrays", "tree_nodes", f"tree {t}: a node refers to a node the tree does not have, "
                                                     "or to one not after it (a cycle)")
        feature = part["feature_idx"][inner].astype(np.int64)
        if ((feature < 0) | (feature >= n_inputs)).any() or part["is_categorical"].any() \
                or np.isnan(part["num_threshold"][inner]).any():
            raise StateError("arrays", "tree_nodes", f"tree {t}: a split on an input the model does not have, "
                                                     "a categorical split or a threshold that is not a number")
        trees.append(TreePredictor(np.ascontiguousarray(part), np.zeros((0, 8), np.uint32),
                                   np.zeros((0, 8), np.uint32)))
    return trees


# --------------------------------------------------------------------------- fitting
#: the value of a run indicator the logistic model is fitted with (:func:`run_indicators`): its coefficient is then
#: ``1/RUN_SCALE`` of the run's offset, so the L2 penalty barely touches the runs' own failure rates
RUN_SCALE = 10.0


def run_indicators(runs) -> sp.csr_matrix | None:
    """One column per run (``RUN_SCALE`` on its rows), appended to a design so that a logistic model is fitted
    *within* runs: each run gets its own intercept and the coefficients say which trajectory of a run fails, not which
    run is long or fails often (a confound between runs of different agents; the protocols compare pairs of one run).
    None for fewer than two runs."""
    import scipy.sparse as sp

    codes, names = pd.factorize(np.asarray(runs, dtype=object))
    if len(names) < 2:
        return None
    return sp.csr_matrix((np.full(len(codes), RUN_SCALE), (np.arange(len(codes)), codes)),
                         shape=(len(codes), len(names)))


def fold_run_intercepts(coef: np.ndarray, intercept: float, n_columns: int, runs) -> tuple[np.ndarray, float]:
    """``(coef, intercept)`` of a model fitted with :func:`run_indicators`: the feature coefficients, and the
    intercept of the average training row's run (the runs' offsets weighed by their rows) - a new run's own level is
    the calibration's and the label-shift adaptation's business."""
    coef = np.asarray(coef, dtype=float).ravel()
    if len(coef) == n_columns:
        return coef, float(intercept)
    codes, _ = pd.factorize(np.asarray(runs, dtype=object))
    offsets = coef[n_columns:] * RUN_SCALE
    return coef[:n_columns].copy(), float(intercept + offsets[codes].mean())


def with_runs(Z, indicators: sp.csr_matrix | None):
    """``Z`` with the run indicators appended (sparse), or ``Z`` itself."""
    import scipy.sparse as sp

    return Z if indicators is None else sp.hstack([sp.csr_matrix(Z), indicators], format="csr")


def inner_folds(y: np.ndarray, groups: np.ndarray, n_splits: int = 3, seed=0) -> list | None:
    """The inner folds by task of a training set (``StratifiedGroupKFold``, shuffled, seeded; ``GroupKFold`` where a
    class is rarer than the folds), when every part - training and validation - holds both classes (each validation
    part is scored by its AUROC); None otherwise (too few tasks or failures: the model is not tuned)."""
    from sklearn.model_selection import GroupKFold, StratifiedGroupKFold

    n_groups = len(np.unique(groups))
    k = min(n_splits, n_groups)
    if k < 2:
        return None
    counts = np.bincount(y.astype(int), minlength=2)
    splitter = (StratifiedGroupKFold(n_splits=k, shuffle=True, random_state=seed) if counts.min() >= k
                else GroupKFold(n_splits=k, shuffle=True, random_state=seed))
    splits = list(splitter.split(np.zeros(len(y)), y, groups))
    both = all(0 < y[part].sum() < len(part) for train, test in splits for part in (train, test))
    return splits if both else None


def fit_text(counts: sp.csr_matrix, vocabulary: list[str], settings: DetectorSettings,
             tasks: np.ndarray | None = None) -> tuple[list[str], np.ndarray]:
    """The training rows' terms (``min_df`` rows, ``min_tasks`` of the rows' ``tasks``, the ``max_terms`` most
    frequent, ties by term) and their IDF."""
    if counts is None or counts.shape[1] == 0:
        return [], np.zeros(0)
    counts = counts.tocsr()
    if not counts.has_canonical_format:  # a repeated entry: summed first (what the sparse operations below assume)
        counts = counts.copy()
        counts.sum_duplicates()
    # the rows' stored entries counted per column with bincount rather than scipy's sparse comparison, sums and
    # products (the same integers, a third of the time: the model selection fits a vocabulary ~600 times)
    n_terms = counts.shape[1]
    rows = np.repeat(np.arange(counts.shape[0]), np.diff(counts.indptr))
    held = counts.data > 0
    columns = counts.indices[held].astype(np.int64)
    df = np.bincount(columns, minlength=n_terms)
    total = np.bincount(counts.indices, weights=counts.data, minlength=n_terms)  # integers: exact in float64
    wanted = df >= settings.min_df
    if tasks is not None and settings.min_tasks > 1:
        codes, _ = pd.factorize(np.asarray(tasks, dtype=object))
        # (task, term) of each entry, each pair once: np.unique took 10x the time of a stable sort of these keys,
        # nearly in order already (rows by task, then columns)
        pairs = np.sort(codes[rows[held]].astype(np.int64) * n_terms + columns, kind="stable")
        first = np.ones(len(pairs), dtype=bool)
        first[1:] = pairs[1:] != pairs[:-1]
        wanted &= np.bincount(pairs[first] % n_terms, minlength=n_terms) >= settings.min_tasks
    keep = np.flatnonzero(wanted)
    order = np.lexsort((term_order(vocabulary)[keep], -total[keep]))  # the most frequent first, ties by term
    chosen = np.sort(keep[order[:settings.max_terms]])
    terms = [vocabulary[i] for i in chosen]
    if not terms:
        return [], np.zeros(0)
    from sklearn.feature_extraction.text import TfidfTransformer

    idf = TfidfTransformer(sublinear_tf=True).fit(counts[:, chosen]).idf_
    return terms, idf


def column_medians(values: np.ndarray, overwrite: bool = False) -> np.ndarray:
    """The median of each column's finite values (each column holds one at least), all columns at once: the very
    floats ``np.median`` gives column by column (a fit has ~1,200 dense columns and the model selection ~400 fits).
    ``overwrite``: ``values`` may be reordered in place (no copy of it is made where every value is finite)."""
    finite = np.isfinite(values)
    out = np.empty(values.shape[1])
    whole = finite.all(axis=0)
    if whole.all():
        out[:] = np.median(values, axis=0, overwrite_input=overwrite)
    elif whole.any():
        out[whole] = np.median(values[:, whole], axis=0, overwrite_input=True)  # values[:, whole] is a copy
    if not whole.all():
        part = np.sort(np.where(finite[:, ~whole], values[:, ~whole], np.nan), axis=0)  # NaN sorted last
        k = finite[:, ~whole].sum(axis=0)
        cols = np.arange(part.shape[1])
        low, high = part[(k - 1) // 2, cols], part[k // 2, cols]
        out[~whole] = np.where(k % 2 == 1, low, (low + high) / 2)
    return out


def unfitted_detector(features: TrajectoryFeatures, y: np.ndarray, g: np.ndarray,
                      settings: DetectorSettings) -> FittedDetector:
    """What :func:`fit_detector` sets before it fits: the vocabulary and IDF, the dense columns and their medians -
    or, where the rows hold one class, the constant log-odds."""
    out = FittedDetector(settings, n_train=len(y), n_failures=int(y.sum()))
    if "text" in settings.groups:
        out.terms, out.idf = fit_text(features.counts, features.vocabulary, settings, g)
    names, values = features.dense_of([grp for grp in settings.groups if grp != "text"])
    observed = np.isfinite(values).any(axis=0) if len(values) else np.zeros(len(names), bool)
    out.dense_names = [name for name, seen in zip(names, observed) if seen]  # a column never observed: left out
    if not observed.all():
        values = values[:, observed]
    # ``values`` is this fit's own copy (dense_of's): its medians may reorder it in place, and it is dropped after
    out.median = column_medians(values, overwrite=True) if len(values) else np.zeros(len(out.dense_names))
    del values
    if len(y) == 0 or y.all() or not y.any():
        rate = float(y.mean()) if len(y) else 0.5
        out.constant = float(np.log(np.clip(rate, 1e-6, 1 - 1e-6) / np.clip(1 - rate, 1e-6, 1)))
    return out


def fit_detector(features: TrajectoryFeatures, failure: np.ndarray, groups: np.ndarray,
                 settings: DetectorSettings = DetectorSettings(),
                 on_fit: Callable[[np.ndarray], None] | None = None,
                 fixed: dict[str, Any] | None = None) -> FittedDetector:
    """Fit a detector on every row of ``features`` (the training rows: select them first with
    :meth:`TrajectoryFeatures.take`); ``failure`` their labels, ``groups`` their tasks (the inner folds).
    ``on_fit(index)`` is told the ``index`` rows it was fitted on (a test's hook). ``fixed``: the hyperparameters
    to use instead of choosing them by inner folds (``{"C": c}``, or ``{"gbm": params}``) - the model selection's
    inner fits (:mod:`.detector_selection`)."""
    from sklearn.decomposition import TruncatedSVD
    from sklearn.ensemble import HistGradientBoostingClassifier
    from sklearn.linear_model import LogisticRegression, LogisticRegressionCV
    from sklearn.model_selection import GridSearchCV

    y = np.asarray(failure, dtype=bool)
    g = np.asarray(groups)
    if not (len(y) == len(g) == len(features)):
        raise ValueError(f"features, failure and groups must have one length: {len(features)}, {len(y)}, {len(g)}")
    if on_fit is not None:
        on_fit(features.index)
    out = unfitted_detector(features, y, g, settings)
    if out.constant is not None:
        return out
    with one_thread():
        if settings.model == "logistic":
            n_columns, Zfit, runs = standardized_design(out, features)
            splits = None if fixed else inner_folds(y, g, settings.inner_splits, settings.seed)
            if splits is None:
                out.C = float((fixed or {}).get("C") or 1.0)
                model = LogisticRegression(C=out.C, max_iter=2000).fit(Zfit, y)
            else:
                model = LogisticRegressionCV(Cs=list(C_GRID), cv=splits, scoring=INNER_SCORING, max_iter=2000,
                                             **new_cv_args()).fit(Zfit, y)
                out.C = float(np.ravel(model.C_)[0])
            out.coef, out.intercept = fold_run_intercepts(model.coef_, float(model.intercept_[0]), n_columns, runs)
        else:
            if out.terms:
                tfidf = out.text_tfidf(features)
                k = min(SVD_COMPONENTS, len(out.terms) - 1, tfidf.shape[0] - 1)
                if k >= 1:
                    out.svd = TruncatedSVD(n_components=k, random_state=settings.seed).fit(tfidf).components_
            X = out.design(features)
            with np.errstate(all="ignore"):
                occlusion = np.nanmedian(X, axis=0) if X.shape[1] else np.zeros(0)
            out.occlusion = np.where(np.isfinite(occlusion), occlusion, 0.0)
            gbm = HistGradientBoostingClassifier(random_state=settings.seed, **GBM_FIXED)
            splits = None if fixed else inner_folds(y, g, settings.inner_splits, settings.seed)
            if splits is None:
                chosen = (fixed or {}).get("gbm") or {k: v[0] for k, v in GBM_GRID.items()}
                fitted = gbm.set_params(**chosen).fit(X, y)
            else:
                fitted = GridSearchCV(gbm, GBM_GRID, cv=splits, scoring=INNER_SCORING).fit(X, y).best_estimator_
            out.gbm_params = {k: fitted.get_params()[k] for k in GBM_GRID}
            out.trees = [predictor for iteration in fitted._predictors for predictor in iteration]
            out.intercept = float(np.ravel(fitted._baseline_prediction)[0])
    return out


def standardized_design(out: FittedDetector, features: TrajectoryFeatures) -> tuple[int, Any, np.ndarray]:
    """Set the logistic detector ``out``'s standardization (its terms, IDF and medians set) from ``features`` (its
    training rows) and return ``(n_columns, Zfit, runs)``: the design's column count, the design the model is fitted
    on (with the run indicators when fitted within runs) and each row's run."""
    from sklearn.preprocessing import StandardScaler

    text = out.text_tfidf(features)
    dense = out.dense_values(features, impute=True)
    text_scale = StandardScaler(with_mean=False).fit(text).scale_ if text.shape[1] else np.zeros(0)
    dense_scaler = StandardScaler().fit(dense) if dense.shape[1] else None
    out.mean = np.concatenate([np.zeros(text.shape[1]), dense_scaler.mean_ if dense_scaler else np.zeros(0)])
    scale = np.concatenate([text_scale, dense_scaler.scale_ if dense_scaler else np.zeros(0)])
    out.scale = np.where(scale > MIN_SCALE, scale, 1.0)
    del dense  # the design below makes its own (held while the model fits); the TF-IDF it reuses
    Z = out.design(features, tfidf=text)
    del text
    runs = features.index["run"].to_numpy(dtype=object) if "run" in features.index else np.zeros(len(features))
    Zfit = with_runs(Z, run_indicators(runs) if out.settings.within_runs else None)
    return Z.shape[1], Zfit, runs  # not Z: with run indicators Zfit is a copy, and Z is dropped before the fit


def fit_logistic_path(features: TrajectoryFeatures, failure: np.ndarray, groups: np.ndarray,
                      settings: DetectorSettings, Cs: Sequence[float]) -> list[FittedDetector]:
    """The logistic detector fitted at each regularization of ``Cs`` (ascending: each fit starts from the previous
    one's coefficients) on the same vocabulary, medians and standardization - what the model selection's inner folds
    choose ``C`` among (:mod:`.detector_selection`). The first fit starts from zero, as :func:`fit_detector`'s own
    (the very floats it gives at that ``C``); the design is built once for the whole path, the fits are
    :func:`logistic_path`'s."""
    Cs = sorted(float(c) for c in Cs)
    if settings.model != "logistic" or len(Cs) == 1:
        return [fit_detector(features, failure, groups, settings, fixed={"C": c}) for c in Cs]
    y = np.asarray(failure, dtype=bool)
    first = unfitted_detector(features, y, np.asarray(groups), settings)
    if first.constant is not None:
        return [first] * len(Cs)
    out = []
    with one_thread():
        n_columns, Zfit, runs = standardized_design(first, features)
        # the first from zero (no coefficients yet), each next from the previous, run offsets too
        for C, (coef_, intercept_) in zip(Cs, logistic_path(Zfit, y, Cs, max_iter=PATH_MAX_ITER)):
            coef, intercept = fold_run_intercepts(coef_, float(intercept_[0]), n_columns, runs)
            out.append(replace(first, coef=coef, intercept=intercept, C=C))
    return out


#: the iterations each fit of :func:`fit_logistic_path` may take (as ``LogisticRegression(max_iter=...)`` in
#: :func:`fit_detector`)
PATH_MAX_ITER = 2000


def logistic_path(X, y: np.ndarray, Cs: Sequence[float], max_iter: int = 100, tol: float = 1e-4):
    """``(coef_, intercept_)`` of scikit-learn's ``LogisticRegression(C=C, max_iter=max_iter, tol=tol,
    warm_start=True)`` fitted on ``X`` (CSR or dense), ``y`` (two classes, True the positive) at each ``C`` of ``Cs`` in
    turn, each from the previous one's coefficients - the very floats (tests/test_detector_speed.py compares them bit
    for bit): its loss and gradient (scikit-learn's ``HalfBinomialLoss`` kernels, the penalty and the sums as it writes
    them) and its call of scipy's L-BFGS-B with its options. Written out because the model selection fits ~2,000 of
    these, each of ~40 evaluations on a few hundred rows, where scikit-learn's per-fit input checks and per-evaluation
    array-API dispatch (and a new transposed matrix each time) were 15 % of the fits' time."""
    import scipy.sparse as sp
    from scipy.optimize import minimize
    from sklearn._loss.loss import HalfBinomialLoss

    if len(np.unique(np.asarray(y, dtype=bool))) < 2:
        raise ValueError("logistic regression needs both classes among the rows")
    X = X.tocsr() if sp.issparse(X) else np.ascontiguousarray(X, dtype=np.float64)
    XT = X.T  # a view (CSC of the same arrays for a CSR X): what ``X.T @ g`` makes anew at each evaluation
    n = X.shape[0]
    target = np.asarray(y, dtype=bool).astype(np.float64)
    loss = HalfBinomialLoss()
    w = np.zeros(X.shape[1] + 1)
    options = {"maxiter": max_iter, "maxls": 50, "gtol": tol, "ftol": 64 * np.finfo(float).eps}
    for C in Cs:
        l2 = 1.0 / (C * n)

        def value_and_gradient(coef: np.ndarray) -> tuple[float, np.ndarray]:  # LinearModelLoss.loss_gradient's
            weights, intercept = coef[:-1], coef[-1]
            pointwise, gradient = loss.loss_gradient(y_true=target, raw_prediction=X @ weights + intercept,
                                                     sample_weight=None, n_threads=1)
            value = float(np.sum(pointwise) / n)
            value += float(0.5 * l2 * (weights @ weights))
            gradient /= n
            grad = np.empty_like(coef)
            grad[:-1] = XT @ gradient + l2 * weights
            grad[-1] = np.sum(gradient)
            return value, grad

        w = minimize(value_and_gradient, w, method="L-BFGS-B", jac=True, options=options).x
        yield w[:-1][None, :], w[-1:]


# --------------------------------------------------------------------------- calibration as two numbers
def platt_map(log_odds, failure, runs=None) -> dict[str, Any]:
    """Platt scaling of out-of-fold log-odds (:func:`~agentuq_nb.evaluation.calibration.fit_calibrator`) as the two
    numbers it is, ``p = 1 / (1 + exp(-(a·s + b)))`` (``constant`` instead where the rows held one class); ``n`` rows.
    Two numbers by hand rather than scikit-learn objects: nothing else is needed to apply the map. With ``runs`` (two
    or more): :func:`within_run_platt`."""
    from agentuq_nb.evaluation.calibration import fit_calibrator

    s = np.asarray(log_odds, dtype=float)
    ok = np.isfinite(s)
    if runs is not None and len(pd.unique(np.asarray(runs, dtype=object)[ok])) >= 2:
        return within_run_platt(s, failure, runs)
    fitted = fit_calibrator(s[ok], np.asarray(failure, dtype=bool)[ok], "platt")
    if fitted.constant is not None:
        return {"constant": float(fitted.constant), "n": int(fitted.n_fitted)}
    scaler, logistic = fitted.model[0], fitted.model[-1]
    slope = float(logistic.coef_[0, 0] / scaler.scale_[0])
    return {"a": slope, "b": float(logistic.intercept_[0] - slope * scaler.mean_[0]), "n": int(fitted.n_fitted)}


def within_run_platt(log_odds, failure, runs) -> dict[str, Any]:
    """A Platt map ``{a, b, n}`` whose slope ``a`` is fitted *within* runs (logistic regression of the failures on the
    log-odds with an intercept per run, :func:`run_indicators`; Platt's weak penalty) and whose offset ``b`` makes the
    mean probability over the rows their failure rate. Pooled over runs, a Platt map also fits how the runs' mean
    log-odds follow their failure rates - across agents they barely do - and shrinks the slope towards 0: every
    probability of a new run then sits near the training rate (flat: 0.28 for all). Within runs the slope is what a
    log-odds says about a trajectory *of its run*; the run's own level is the label-shift adaptation's
    (:mod:`.label_shift`). A slope that is not positive gives the constant training rate."""
    from scipy.optimize import brentq

    from agentuq_nb.evaluation.calibration import PLATT_C

    s = np.asarray(log_odds, dtype=float)
    ok = np.isfinite(s)
    s, y, runs = s[ok], np.asarray(failure, dtype=bool)[ok], np.asarray(runs, dtype=object)[ok]
    rate = float(y.mean()) if len(y) else 0.5
    if len(y) == 0 or y.all() or not y.any() or np.ptp(s) == 0:
        return {"constant": rate, "n": int(len(y))}
    mean, sd = float(s.mean()), float(s.std())
    z = ((s - mean) / sd)[:, None]
    coef, _ = next(logistic_path(with_runs(z, run_indicators(runs)), y, [PLATT_C], max_iter=1000))  # its fit
    a = float(coef[0, 0]) / sd
    if a <= 0:
        return {"constant": rate, "n": int(len(y))}
    b = brentq(lambda b: float(np.mean(1.0 / (1.0 + np.exp(-(a * s + b))))) - rate, -50 - a * np.abs(s).max(),
               50 + a * np.abs(s).max())
    return {"a": a, "b": float(b), "n": int(len(y))}


def platt_probability(params: dict[str, Any] | None, log_odds) -> np.ndarray:
    """The failure probability of log-odds under a :func:`platt_map` (None: the model's own sigmoid, uncalibrated)."""
    s = np.asarray(log_odds, dtype=float)
    if params is None:
        return 1.0 / (1.0 + np.exp(-s))
    if "constant" in params:
        return np.where(np.isfinite(s), float(params["constant"]), np.nan)
    return 1.0 / (1.0 + np.exp(-(float(params["a"]) * s + float(params["b"]))))


class PlattMap(BaseModel):
    """A :func:`platt_map` as read back from a detector folder: the slope ``a`` and offset ``b`` (finite, bounded), or a
    probability ``constant``; ``n`` rows."""

    model_config = ConfigDict(extra="ignore")

    a: Optional[FiniteParameter] = None
    b: Optional[FiniteParameter] = None
    constant: Optional[Annotated[float, Field(allow_inf_nan=False, ge=0, le=1)]] = None
    n: int = Field(0, ge=0)
    #: the failure rate the map was fitted at, and the label-shift prior strength chosen for it (null: not adapted)
    source_rate: Optional[Annotated[float, Field(allow_inf_nan=False, ge=0, le=1)]] = None
    prior_strength: Optional[Annotated[float, Field(allow_inf_nan=False, ge=0, le=MAX_PARAMETER)]] = None

    @classmethod
    def check(cls, params: Any) -> dict[str, Any] | None:
        """``params`` checked (None stays None: the model's own sigmoid), as the dict :func:`platt_probability` reads."""
        if params is None:
            return None
        try:
            read = cls.model_validate(params)
        except ValidationError as err:
            raise StateError("description", *first_error(err)) from None
        shift = {name: getattr(read, name) for name in ("source_rate", "prior_strength") if name in read.model_fields_set}
        if read.constant is not None:
            return {"constant": read.constant, "n": read.n, **shift}
        if read.a is None or read.b is None:
            raise StateError("description", "a", "a calibration map holds a and b, or a constant")
        return {"a": read.a, "b": read.b, "n": read.n, **shift}

"""The estimator forest: the best few of each family and the length baselines, identical-score estimators as one row
naming its aliases, n per row; and the table column it reads (``same_scores_as``)."""
from __future__ import annotations

import matplotlib

matplotlib.use("Agg")
import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402

from agentuq_nb.evaluation.estimator_table import same_scores_as  # noqa: E402
from agentuq_nb.figures.estimators import estimator_forest_figure, forest_rows  # noqa: E402


def test_same_scores_are_found_within_a_family_missing_values_included():
    a = np.array([0.1, np.nan, 0.3])
    out = same_scores_as([("x.mean", "action", a), ("x.max", "action", a.copy()), ("x.first3", "action", -(-a)),
                          ("y.mean", "action", np.array([0.1, 0.2, 0.3])),  # differs where x is missing
                          ("num_tool_calls", "baseline", a.copy()),  # another family: its own row
                          ("empty", "action", np.full(3, np.nan)), ("empty2", "action", np.full(3, np.nan))])
    assert out == [None, "x.mean", "x.mean", None, None, None, None]


def _table() -> pd.DataFrame:
    rows = []
    for family, names in (("token", [f"assistant.s{i}" for i in range(6)]), ("action", ["a.mean", "a.max", "a.first3",
                                                                                          "b.mean"]),
                          ("tracer", ["tracer.default"]), ("baseline", ["num_messages", "num_tool_calls", "agent_chars"])):
        for i, name in enumerate(names):
            rows.append({"estimator": name, "family": family, "auroc": 0.8 - 0.05 * i, "auroc_lo": 0.6 - 0.05 * i,
                         "auroc_hi": 0.9, "n": 96 if family != "action" else 39, "n_failures": 75 if family != "action"
                         else 30, "invert": False, "beats_length_baseline": family != "baseline" and i % 2 == 0,
                         "same_scores_as": "a.mean" if name in ("a.max", "a.first3") else None})
    rows.append({"estimator": "undefined", "family": "token", "auroc": np.nan, "n": 0, "n_failures": 0})
    return pd.DataFrame(rows)


def test_forest_rows_keep_the_best_of_each_family_collapse_aliases_and_keep_every_baseline():
    rows = forest_rows(_table(), per_family=3)
    assert list(rows["estimator"]) == ["assistant.s0", "assistant.s1", "assistant.s2", "tracer.default", "a.mean",
                                       "b.mean", "num_messages", "num_tool_calls", "agent_chars"]
    assert rows.set_index("estimator").loc["a.mean", "aliases"] == ["a.max", "a.first3"]
    assert rows.set_index("estimator")["shown_of"].to_dict()["assistant.s0"] == 6  # of the 6 with an AUROC
    only = forest_rows(_table(), families=["action"])
    assert set(only["family"]) == {"action", "baseline"}


def test_the_forest_names_aliases_gives_n_per_row_and_fits_a_paper_column():
    fig = estimator_forest_figure(_table())
    labels = [t.get_text() for t in fig.axes[0].get_yticklabels()]
    assert any(label.startswith("a.mean") and "= .max, .first3" in label for label in labels)
    assert not any(label.startswith("a.max") for label in labels)
    counts = [t.get_text() for t in fig.axes[1].get_yticklabels()]
    assert counts.count("39 (30)") == 2 and counts.count("96 (75)") == 7
    assert fig.get_size_inches()[0] == 3.4
    assert min(t.get_fontsize() for t in fig.axes[0].get_yticklabels()) >= 7
    legend = [t.get_text() for t in fig.legends[0].get_texts()]
    assert "token log-probs (3 of 6)" in legend and "resampled actions (4 of 4)" in legend


def test_a_family_declared_on_its_module_is_ranked_coloured_and_named_by_every_reader():
    """One ``Family`` record per family: the listing's rank, the forest's colour, label and place, and whether it is a
    black-box family (the black-box combinations' inputs, the reason a skipped black-box step gives) all read it."""
    from agentuq_nb.estimators.base import FAMILIES, Family, blackbox_families, declare_family, family_rank
    from agentuq_nb.figures.estimators import family_color, family_label

    assert family_rank("token") < family_rank("structure") < family_rank("baseline")
    assert blackbox_families() == ("structure", "tracer")
    try:
        declare_family(Family("longest_message", rank=12, label="longest message", color="#123456", forest_order=1.5,
                              blackbox=True))
        assert family_rank("longest_message") == 12 and "longest_message" in blackbox_families()
        assert family_color("longest_message") == "#123456" and family_label("longest_message") == "longest message"
        table = pd.concat([_table(), pd.DataFrame([{"estimator": "longest.max", "family": "longest_message",
                                                   "auroc": 0.7, "auroc_lo": 0.6, "auroc_hi": 0.8, "n": 96,
                                                   "n_failures": 75, "invert": False}])], ignore_index=True)
        order = list(forest_rows(table, per_family=1).drop_duplicates("family")["family"])
        assert order == ["token", "longest_message", "tracer", "action", "baseline"]
    finally:
        FAMILIES.pop("longest_message", None)
    assert family_rank("longest_message") == 50 and family_color("longest_message") == family_color("detector")

"""benchmarks/outputs_unchanged.py's comparisons: a real estimator table, a real metrics file, real arrays and
figures saved by the package's one save(), each compared with itself and with a copy changed in one place."""
from __future__ import annotations

import csv
import importlib.util
import json
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

ROOT = Path(__file__).resolve().parents[1]
GOLDEN = ROOT / "tests" / "data" / "golden_synthetic"
spec = importlib.util.spec_from_file_location("outputs_unchanged", ROOT / "benchmarks" / "outputs_unchanged.py")
outputs_unchanged = importlib.util.module_from_spec(spec)
sys.modules["outputs_unchanged"] = outputs_unchanged  # its dataclasses look their module up there
spec.loader.exec_module(outputs_unchanged)


def edited_table(src: Path, dst: Path, edit) -> Path:
    with open(src, newline="") as f:
        rows = list(csv.reader(f))
    edit(rows)
    with open(dst, "w", newline="") as f:
        csv.writer(f, lineterminator="\n").writerows(rows)
    return dst


def test_a_table_equals_itself_and_one_changed_cell_is_named(tmp_path):
    table = GOLDEN / "estimator_table.csv"
    assert outputs_unchanged.compare_tables(table, shutil.copy(table, tmp_path / "same.csv")) == []

    def bump(rows):
        col = rows[0].index("auroc_hi")
        row = next(r for r in rows if r[0] == "assistant.trajectory_nll")
        row[col] = repr(float(row[col]) + 1e-12)

    changed = edited_table(table, tmp_path / "estimator_table.csv", bump)
    diffs = outputs_unchanged.compare_tables(table, changed)
    assert len(diffs) == 1
    assert "row estimator=assistant.trajectory_nll, column auroc_hi: '0.9800215311004784' → " in diffs[0]
    # a stated tolerance lets a last-digit difference through, not a larger one
    assert outputs_unchanged.compare_tables(table, changed, outputs_unchanged.Tolerance(rtol=1e-9)) == []

    def bigger(rows):
        rows[1][rows[0].index("auroc")] = "0.86"

    assert len(outputs_unchanged.compare_tables(table, edited_table(table, tmp_path / "b.csv", bigger),
                                                 outputs_unchanged.Tolerance(rtol=1e-9))) == 1


def test_rows_and_columns_missing_added_or_reordered_are_differences(tmp_path):
    table = GOLDEN / "estimator_table.csv"
    dropped = edited_table(table, tmp_path / "dropped.csv", lambda rows: rows.pop(3))
    name = [r[0] for r in csv.reader(open(table))][3]
    assert outputs_unchanged.compare_tables(table, dropped) == [f"dropped.csv: 1 row(s) only in base: estimator={name}"]

    def swap(rows):
        rows[1], rows[2] = rows[2], rows[1]

    assert outputs_unchanged.compare_tables(table, edited_table(table, tmp_path / "s.csv", swap)) == [
        "s.csv: the same rows in another order"]

    def drop_column(rows):
        col = rows[0].index("prr")
        for r in rows:
            del r[col]

    assert outputs_unchanged.compare_tables(table, edited_table(table, tmp_path / "c.csv", drop_column)) == [
        "c.csv: column(s) only in base: prr"]


def test_json_differences_name_their_path_and_the_card_clock_is_left_out():
    metrics = json.loads((GOLDEN / "eval_metrics.assistant.avg_token_nll.json").read_text())
    changed = json.loads(json.dumps(metrics))
    changed["ci"]["auroc"][1] = 0.5
    assert outputs_unchanged.compare_json(metrics, metrics) == []
    assert outputs_unchanged.compare_json(metrics, changed) == ["ci.auroc[1]: 0.9800215311004784 → 0.5"]
    card = {"created_at": "2026-11-29T10:43:06+00:00", "seconds": {"total": 6.4}, "protocols": metrics}
    later = {**card, "created_at": "2026-11-29T11:00:00+00:00", "seconds": {"total": 9.1}}
    assert outputs_unchanged.compare_json(card, later, ignore=outputs_unchanged.CARD_VOLATILE) == []
    assert outputs_unchanged.compare_json(card, {**later, "protocols": changed},
                                          ignore=outputs_unchanged.CARD_VOLATILE) == [
        "protocols.ci.auroc[1]: 0.9800215311004784 → 0.5"]
    # a count that turns into a float, or a flag into a number, is a difference
    assert outputs_unchanged.compare_json({"n": True}, {"n": 1}) == ["n: True → 1"]


def test_a_detector_folders_arrays_are_compared_array_by_array(tmp_path):
    base, head = tmp_path / "base", tmp_path / "head"
    base.mkdir(), head.mkdir()
    weights = np.linspace(-1, 1, 50)
    np.savez(base / "arrays.npz", weights=weights, terms=np.array(["a", "b"]))
    np.savez(head / "arrays.npz", weights=weights, terms=np.array(["a", "b"]))
    shutil.copy(GOLDEN / "estimator_table.csv", base / "protocols.csv")
    shutil.copy(GOLDEN / "estimator_table.csv", head / "protocols.csv")

    def compare():
        return outputs_unchanged.compare_folders(base, head, outputs_unchanged.compare_detector_file)

    assert compare() == []
    np.savez(head / "arrays.npz", weights=weights + np.eye(1, 50, 7).ravel() * 1e-9, terms=np.array(["a", "b"]))
    assert compare() == ["arrays.npz: array weights: 1 of 50 values differ (largest 1e-09)"]
    (head / "top_features.csv").write_text("feature\nx\n")
    assert "top_features.csv: only in head" in compare()


FIGURE_SCRIPT = """
import sys
import matplotlib
matplotlib.use("Agg")
import matplotlib.pyplot as plt
from agentuq_nb.figures.style import save, save_as, use_style
use_style()
for folder, title in zip(sys.argv[1::2], sys.argv[2::2]):
    fig, ax = plt.subplots()
    ax.plot([0, 1, 2], [0.2, 0.9, 0.4], label="failure")
    ax.set_title(title)
    ax.legend()
    save(fig, "probe", folder)
    for fmt in ("pdf", "svg", "png"):  # a path the user names (probe --plot), marked as the command's
        save_as(fig, f"{folder}/named.{fmt}", "probe", "--plot")
    plt.close(fig)
"""


@pytest.fixture(scope="module")
def figures(tmp_path_factory) -> dict[str, Path]:
    """The same figure saved by figures.style.save in two processes (the second also saves it with another
    title)."""
    tmp = tmp_path_factory.mktemp("figures")
    for pairs in ([tmp / "first", "n = 3 trajectories"],
                  [tmp / "second", "n = 3 trajectories", tmp / "other", "n = 4 trajectories"]):
        subprocess.run([sys.executable, "-c", FIGURE_SCRIPT, *map(str, pairs)], check=True, cwd=ROOT)
    return {name: tmp / name for name in ("first", "second", "other")}


def test_the_same_figure_saved_in_two_processes_is_byte_identical(figures):
    assert outputs_unchanged.files_under(figures["first"]) == ["named.pdf", "named.png", "named.svg", "probe.pdf",
                                                                "probe.png"]
    assert outputs_unchanged.compare_folders(figures["first"], figures["second"], outputs_unchanged.compare_bytes) == []


def test_a_changed_figure_is_a_byte_difference(figures):
    diffs = outputs_unchanged.compare_folders(figures["first"], figures["other"], outputs_unchanged.compare_bytes)
    assert [d.split(":")[0] for d in diffs] == ["named.pdf", "named.png", "named.svg", "probe.pdf", "probe.png"]
    assert all("bytes differ" in d and "first at offset" in d for d in diffs)


def test_the_card_text_is_compared_but_for_the_time_it_was_made(tmp_path):
    line = "Made by `agentuq-nb train-detector` at {}; features text, blackbox, embeddings, length."
    base, head = tmp_path / "base", tmp_path / "head"
    base.mkdir(), head.mkdir()
    (base / "card.md").write_text(line.format("2026-11-29T11:12:25+00:00") + "\n| within_run | 0.715 |\n")
    (head / "card.md").write_text(line.format("2026-11-29T11:40:02+00:00") + "\n| within_run | 0.715 |\n")
    assert outputs_unchanged.compare_folders(base, head, outputs_unchanged.compare_detector_file) == []
    (head / "card.md").write_text(line.format("2026-11-29T11:40:02+00:00") + "\n| within_run | 0.716 |\n")
    assert outputs_unchanged.compare_folders(base, head, outputs_unchanged.compare_detector_file) == [
        "card.md: line 2: '| within_run | 0.715 |' → '| within_run | 0.716 |'"]


def kept_side(keep: Path, label: str, table: Path) -> None:
    """A side's table outputs as the script keeps them (``KEEP/<label>/table/``)."""
    folder = keep / label / "table"
    folder.mkdir(parents=True)
    shutil.copy(table, folder / "estimator_table.csv")
    (folder / "stamp.json").write_text("{}")


def test_the_summary_says_pass_or_diff_per_check_and_the_exit_code_follows(tmp_path, capsys):
    if not (ROOT / ".git").exists():
        pytest.skip("not a git checkout: the script names its sides by commit")
    head = outputs_unchanged.git(ROOT, "rev-parse", "HEAD")
    args = ["--base", head, "--keep", str(tmp_path), "--compare-only", "--checks", "table"]
    kept_side(tmp_path, f"base-{head[:12]}", GOLDEN / "estimator_table.csv")
    kept_side(tmp_path, "head-worktree", GOLDEN / "estimator_table.csv")
    assert outputs_unchanged.main(args) == 0
    assert "PASS  table: estimator_table.csv, 33 rows × 28 columns, equal exactly" in capsys.readouterr().out

    def change(rows):
        rows[5][rows[0].index("n_failures")] = "21"

    edited_table(GOLDEN / "estimator_table.csv", tmp_path / "head-worktree" / "table" / "estimator_table.csv", change)
    assert outputs_unchanged.main(args) == 1
    out = capsys.readouterr().out
    assert "DIFF  table: 1 difference(s)" in out and ", column n_failures: '20' → '21'" in out
    assert outputs_unchanged.main([*args[:-1], "table,figures"]) == 2  # no figures kept: an error, not a pass
    assert "ERROR figures: base: no outputs in" in capsys.readouterr().out

"""Outputs the user names are created, never clobbered (issue 41, point 1): one rule (``agentuq_nb.io.outputs``) for
every writer with a user-given path, hunted with hypothesis over what can sit at the path; a study's folders come
from the project's layout only."""
from __future__ import annotations

import os
import shutil
import socket
import stat
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from tests.test_hostile_folders import assert_ended_cleanly, run_cli, tree_checksum

from agentuq_nb.io.errors import InputError
from agentuq_nb.io.outputs import check_output_file, check_output_folder

from conftest import make_aggregated_run

PAGE_START = b"<!doctype html>"


@pytest.fixture(scope="module")
def made_run(tmp_path_factory):
    """A small extracted and aggregated run and the results it was made from."""
    root = tmp_path_factory.mktemp("outputs")
    run = make_aggregated_run(root, num_simulations=4, messages_per_simulation=4, tokens_per_message=3, seed=5)
    return root / "src" / "results.json", run


def copy_run(made_run, box: Path) -> Path:
    """box/src/results.json, box/run (made from it: its manifest names the copy), box/sibling (never to change)."""
    results, run = made_run
    shutil.copytree(results.parent, box / "src")
    shutil.copytree(run, box / "run", symlinks=True)
    manifest = box / "run" / "manifest.json"
    manifest.write_text(manifest.read_text().replace(str(results.resolve()), str((box / "src" / "results.json"))))
    sibling = box / "sibling"
    (sibling / "sub").mkdir(parents=True)
    (sibling / "notes.html").write_text("<p>mine</p>")
    (sibling / "sub" / "data.txt").write_text("keep me\n")
    return box


@pytest.fixture
def box(tmp_path, made_run):
    return copy_run(made_run, tmp_path)


def _explore(box: Path, out, *extra) -> tuple[int, str, str]:
    return run_cli("explore", box / "run", "--out", out, *extra)


# --------------------------------------------------------------------------- the cases, one by one

def test_explore_refuses_a_fifo_a_folder_and_every_file_of_the_run_it_reads(box):
    os.mkfifo(box / "fifo.html")
    run = box / "run"
    before = tree_checksum(run)
    source = box / "src" / "results.json"
    source_bytes = source.read_bytes()
    cases = {box / "fifo.html": "is a FIFO", run / "manifest.json": "is manifest.json of the run folder",
             run / "tokens.parquet": "is tokens.parquet of the run folder",
             run / "notebooks" / "04_evaluate.ipynb": "is notebooks/04_evaluate.ipynb of the run folder",
             run / ".lock": "is .lock of the run folder", source: "is an input of 'explore'",
             run: f"is a directory: --out names the HTML page to write (e.g. {run / 'explorer.html'})",
             source / "x.html": "--out names a path that cannot be made: "}
    for out, said in cases.items():
        code, stdout, stderr = _explore(box, out)
        assert_ended_cleanly(code, stdout, stderr)
        assert code == 2 and said in stderr and str(out) in stderr, (out, stderr)
        assert ".tmp" not in stderr  # the folder case named a temporary file before
    assert stat.S_ISFIFO(os.lstat(box / "fifo.html").st_mode)
    assert tree_checksum(run) == before and source.read_bytes() == source_bytes


def test_a_socket_and_a_character_device_are_never_replaced(box):
    with socket.socket(socket.AF_UNIX) as server:
        server.bind(str(box / "sock.html"))
        code, _, stderr = _explore(box, box / "sock.html")
        assert code == 2 and "is a socket" in stderr
    with pytest.raises(InputError, match="is a character device"):  # /dev/null itself: only checked, never written
        check_output_file("/dev/null", command="explore", force=True)
    assert stat.S_ISCHR(os.stat("/dev/null").st_mode)


def test_an_existing_file_is_replaced_only_when_explore_wrote_it_or_with_force(box):
    mine = box / "sibling" / "notes.html"
    code, _, stderr = _explore(box, mine)
    assert code == 2 and "exists and was not made by 'explore'" in stderr and "--force" in stderr
    assert mine.read_text() == "<p>mine</p>"
    page = box / "view.html"
    assert _explore(box, page)[0] == 0 and page.read_bytes().startswith(PAGE_START)
    first = page.stat().st_mtime_ns
    assert _explore(box, page)[0] == 0 and page.stat().st_mtime_ns >= first  # its own page: replaced
    assert _explore(box, mine, "--force")[0] == 0 and mine.read_bytes().startswith(PAGE_START)
    beside = box / "run" / "explorer.html"  # the README's example: a page beside the run's tables
    assert _explore(box, beside)[0] == 0 and beside.exists()


def test_a_symlink_is_refused_whatever_it_points_to_even_with_force(box):
    targets = {"file": box / "sibling" / "notes.html", "folder": box / "sibling" / "sub", "missing": box / "nowhere"}
    outside = tree_checksum(box / "sibling")
    for name, target in targets.items():
        link = box / f"{name}.html"
        link.symlink_to(target)
        code, _, stderr = _explore(box, link, "--force")
        assert code == 2 and "is a symlink" in stderr, stderr
        assert os.path.islink(link)
    assert tree_checksum(box / "sibling") == outside and not (box / "nowhere").exists()


def test_token_view_save_and_probe_plot_follow_the_same_rule(box):
    from agentuq_nb.figures.style import check_figure_path
    from agentuq_nb.figures.token_view import TokenView

    view = TokenView("<span>x</span>")
    with pytest.raises(InputError, match="is tokens.parquet of the run folder"):
        view.save(box / "run" / "tokens.parquet")
    with pytest.raises(InputError, match="exists and was not made by 'TokenView.save'"):
        view.save(box / "sibling" / "notes.html")
    path = view.save(box / "view.html")
    assert view.save(path) == path  # its own page again
    with pytest.raises(InputError, match="is a directory"):
        check_figure_path(box / "sibling", "probe", "--plot")
    with pytest.raises(InputError, match=r"--plot: '\.xyz' is not a figure format"):
        check_figure_path(box / "figure.xyz", "probe", "--plot")
    code, _, stderr = run_cli("probe", "hello", "--plot", box / "run" / "checkpoints" / "forest.png")
    assert code == 2 and "is checkpoints/forest.png of the run folder" in stderr  # refused before any sampling


def test_a_figure_probe_wrote_is_recognised_by_its_mark(tmp_path):
    import matplotlib.pyplot as plt

    from agentuq_nb.figures.style import save_as

    for suffix in ("png", "pdf", "svg"):
        fig = plt.figure()
        path = save_as(fig, tmp_path / f"p.{suffix}", "probe", "--plot")
        assert save_as(fig, path, "probe", "--plot") == path  # made before: replaced
        with pytest.raises(InputError, match="was not made by 'explore'"):  # another command's mark is not its own
            check_output_file(path, command="explore", made_before=b"agentuq_nb explore")
        plt.close(fig)


def test_compare_runs_writes_only_its_own_files_into_an_existing_folder(box, made_run):
    out = box / "board"
    out.mkdir()
    (out / "run_leaderboard.csv").write_text("someone else's table\n")
    (out / "readme.txt").write_text("kept\n")
    code, _, stderr = run_cli("compare-runs", box / "run", "--out", out, "--n-boot", "0")
    assert code == 2 and "run_leaderboard.csv: exists and was not made by 'compare-runs'" in stderr
    assert (out / "run_leaderboard.csv").read_text() == "someone else's table\n"
    assert run_cli("compare-runs", box / "run", "--out", out, "--n-boot", "0", "--force")[0] == 0
    assert run_cli("compare-runs", box / "run", "--out", out, "--n-boot", "0")[0] == 0  # its own files now
    assert (out / "readme.txt").read_text() == "kept\n"
    link = box / "board_link"
    link.symlink_to(out)
    code, _, stderr = run_cli("compare-runs", box / "run", "--out", link, "--n-boot", "0")
    assert code == 2 and "is a symlink" in stderr


def test_calibrate_transfer_to_a_folder_that_is_no_run_is_refused(box):
    (box / "etc").mkdir()
    code, stdout, stderr = run_cli("calibrate", box / "run", "--transfer-to", box / "etc")
    assert code == 2 and "--transfer-to: not a run folder" in stderr and not stdout
    assert not list((box / "etc").iterdir())  # nothing written into it


def test_an_output_folder_inside_or_equal_to_an_input_is_refused(box):
    with pytest.raises(InputError, match="an input of 'train'"):
        check_output_folder(box / "src" / "models", command="train", files=["card.json"], inputs=[box / "src"])
    with pytest.raises(InputError, match="is a run folder"):
        check_output_folder(box / "run", command="train", files=["card.json"])


# --------------------------------------------------------------------------- the hunt

KINDS = ["new", "new_in_new_folder", "foreign_file", "own_page", "fifo", "folder", "link_to_file", "link_to_folder",
         "link_to_fifo", "dangling_link", "run_artefact", "run_hidden", "inside_run_folder_of_its", "beside_run",
         "in_run_figures", "source_results", "under_a_file"]


def _plant(box: Path, kind: str, artefact: str) -> Path:
    """Put ``kind`` at a path and return it."""
    run = box / "run"
    paths = {"new": box / "new.html", "new_in_new_folder": box / "a" / "b" / "new.html",
             "run_artefact": run / artefact, "run_hidden": run / ".staging", "beside_run": run / "explorer.html",
             "inside_run_folder_of_its": run / "checkpoints" / "x.html", "in_run_figures": run / "figures" / "x.html",
             "source_results": box / "src" / "results.json",
             "under_a_file": box / "src" / "results.json" / "x.html"}
    if kind in paths:
        return paths[kind]
    path = box / f"{kind}.html"
    if kind == "foreign_file":
        path.write_text("not a page\n")
    elif kind == "own_page":
        assert _explore(box, path)[0] == 0
    elif kind == "fifo":
        os.mkfifo(path)
    elif kind == "folder":
        path.mkdir()
    elif kind.startswith("link_to"):
        target = {"link_to_file": box / "sibling" / "notes.html", "link_to_folder": box / "sibling" / "sub",
                  "link_to_fifo": box / "fifo_target"}[kind]
        if kind == "link_to_fifo":
            os.mkfifo(target)
        path.symlink_to(target)
    elif kind == "dangling_link":
        path.symlink_to(box / "sibling" / "would_be_made.html")
    return path


ALLOWED = {"new", "new_in_new_folder", "own_page", "beside_run", "in_run_figures"}  # and "foreign_file" with --force


@settings(max_examples=30, deadline=None, derandomize=True,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
@given(kind=st.sampled_from(KINDS), force=st.booleans(),
       artefact=st.sampled_from(["manifest.json", "tokens.parquet", "trajectories.parquet", "turn_summary.csv",
                                 "estimator_table.csv", "saup_scores.parquet", "tokens.observations_x.parquet",
                                 "results.json", "sidecars", "notebooks/x.ipynb"]))
def test_any_output_path_is_written_only_when_the_rule_allows(tmp_path_factory, made_run, kind, force, artefact):
    """Whatever is at --out: exit 0 (and a page there) when the rule allows it, else one line naming the path
    (exit 2) with the thing at the path unchanged; the run folder and everything else never change."""
    box = copy_run(made_run, tmp_path_factory.mktemp("hunt"))
    out = _plant(box, kind, artefact)
    allowed = kind in ALLOWED or (kind == "foreign_file" and force)
    run_before = {p: p.read_bytes() for p in (box / "run").rglob("*") if p.is_file() and not p.is_symlink()}
    outside = tree_checksum(box / "sibling")
    source = (box / "src" / "results.json").read_bytes()
    was = os.lstat(out).st_mode if os.path.lexists(out) else None
    code, stdout, stderr = _explore(box, out, *(["--force"] if force else []))
    assert_ended_cleanly(code, stdout, stderr)
    assert (code == 0) == allowed, (kind, force, stderr)
    if allowed:
        assert stat.S_ISREG(os.lstat(out).st_mode) and out.read_bytes().startswith(PAGE_START)
    else:
        assert str(out) in stderr
        assert (os.lstat(out).st_mode if os.path.lexists(out) else None) == was
    assert tree_checksum(box / "sibling") == outside and (box / "src" / "results.json").read_bytes() == source
    for path, data in run_before.items():
        assert path.read_bytes() == data, path

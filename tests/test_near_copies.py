"""Near-copies of training trajectories are said (issue 51 point 3): on the shared real runs none is found between
runs, a copy with a few messages edited is found, leave-one-run-out names a held-out run that nearly duplicates a
training run, and predict counts the run's (near-)copies of training trajectories."""
from __future__ import annotations

import json
import random
from pathlib import Path

import numpy as np
import pytest

from agentuq_nb.io.ingest.results import iter_simulations
from agentuq_nb.uq.near_copies import closest, near_copy_runs, signatures

from conftest import ROOT

REAL = ROOT.parent / "shared" / "data" / "real_runs"
SONNET, OPUS = REAL / "claude-sonnet-4.5_airline_1trial.json", REAL / "claude-opus-4-6_airline_1trial.json"
FAST = {"embedder": "hash", "groups": ["length"], "n_boot": 0, "protocols": ["leave_one_run_out"]}


@pytest.fixture(scope="module")
def near_copy(tmp_path_factory) -> Path:
    """The sonnet run with two words changed in three messages of every trajectory (a copy whose fingerprints
    differ)."""
    if not SONNET.is_file() or not OPUS.is_file():
        pytest.skip(f"the shared real runs are not in {REAL}")
    rng = random.Random(0)
    raw = json.loads(SONNET.read_text())
    for sim in raw["simulations"]:
        long = [m for m in sim["messages"] if isinstance(m.get("content"), str) and len(m["content"].split()) > 4]
        for message in rng.sample(long, min(3, len(long))):
            words = message["content"].split()
            words[rng.randrange(len(words))], words[rng.randrange(len(words))] = "edited", "again"
            message["content"] = " ".join(words)
    path = tmp_path_factory.mktemp("near") / "edited_sonnet.json"
    path.write_text(json.dumps(raw))
    return path


def test_the_real_runs_hold_no_near_copies_across_runs_and_an_edited_copy_is_found(near_copy):
    files = sorted(REAL.glob("*.json"))
    sims = [(f.stem, s.messages) for f in files for s in iter_simulations(f)]
    sig = signatures(m for _, m in sims)
    runs = np.array([r for r, _ in sims], dtype=object)
    table = near_copy_runs(sig, runs)
    assert len(table) == len(files) and table["near_copies"].sum() == 0, table
    edited = signatures(s.messages for s in iter_simulations(near_copy))
    sonnet = runs == SONNET.stem
    matches = closest(edited, sig)
    assert matches.near().sum() >= 48, np.sort(matches.similarity)[:5]  # of 50
    assert (np.flatnonzero(sonnet)[0] <= matches.reference[matches.near()]).all()
    assert (runs[matches.reference[matches.near()]] == SONNET.stem).all()
    # an unrelated run is not a near-copy of the edited one
    assert not closest(sig[runs == OPUS.stem], edited).near().any()


def test_train_detector_and_predict_say_near_copies_of_training_runs(near_copy, tmp_path):
    from agentuq_nb.steps.predict import predict, summary_lines
    from agentuq_nb.steps.train_detector import train_detector

    trained = train_detector([SONNET, OPUS, near_copy], tmp_path / "with_copy", **FAST)
    by_run = {r["run"]: r for r in trained.card["near_copies"]["runs"]}
    assert by_run[near_copy.stem]["near_copies"] >= 48 and by_run[near_copy.stem]["of_run"] == SONNET.stem
    assert by_run[OPUS.stem]["near_copies"] == 0
    said = [n for n in trained.card["notes"] if near_copy.stem in n and "nearly duplicates" in n]
    assert said and "leave-one-run-out scores are not those of an unseen run" in said[0]

    clean = train_detector([SONNET, OPUS], tmp_path / "clean", **FAST)
    assert not any("near-)copies" in n for n in clean.card["notes"])
    result = predict(clean.path, near_copy, tmp_path / "run", n_boot=0)
    copies = result.report["near_copies"]
    assert copies["near_copies"] >= 48 and copies["by_run"] == {SONNET.stem: copies["near_copies"]}
    assert copies["exact"] == 0  # no fingerprint matches: only similarity finds them
    assert (result.predictions["near_copy_of"].dropna() == SONNET.stem).all()
    line = next(line for line in summary_lines(result.report) if "(near-)copies" in line)
    assert line.startswith(f"{copies['near_copies']} of 50 trajectories of this run are (near-)copies")
    other = predict(clean.path, REAL / "qwen2.5-7b_airline_1trial.json", tmp_path / "qwen", n_boot=0)
    assert other.report["near_copies"]["near_copies"] == 0

    # the signatures are untrusted input too: another dtype or shape is one line naming the file and the array
    from tests.test_hostile_detector import edited

    from agentuq_nb.evaluation.detector_apply import load_detector
    from agentuq_nb.io.errors import InputError

    for planted in (np.zeros((3, 64), np.uint32), np.zeros_like(np.load(clean.path / "arrays.npz")[
            "near_copy_signatures"], dtype=np.float64)):
        def edit(card, model, arrays, planted=planted):
            arrays["near_copy_signatures"] = planted

        hostile = edited(clean.path, tmp_path / f"hostile_{planted.dtype}_{len(planted)}", edit)
        with pytest.raises(InputError, match=r"arrays\.npz: near_copy_signatures: is .* not uint32") as err:
            load_detector(hostile)
        assert "\n" not in str(err.value)

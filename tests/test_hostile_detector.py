"""Hostile detector folders: a detector folder is untrusted input, bounded and total. Every array's dtype and shape is
checked (its ``.npy`` header first, before numpy allocates what it claims), every number finite and in range, the GBM's
trees acyclic, the card's size-setting fields bounded as their options are and its embedder the weights' own; any
failure is one line naming the file and the field - never a TypeError, an IndexError, a hang or gigabytes.

Each case edits a real detector folder (trained on small τ²-bench runs, hash embeddings) and re-signs it - the hashes
are not a signature, who edits the folder recomputes them - so only the checks of the content stand in the way."""
from __future__ import annotations

import hashlib
import io
import json
import shutil
import struct
import zipfile
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st
from tests.test_detector import write_run
from tests.test_hostile_folders import assert_ended_cleanly, run_cli

from agentuq_nb.evaluation.detector_apply import load_detector
from agentuq_nb.io.errors import InputError
from agentuq_nb.io.store.detector_dir import canonical_hash

pytestmark = pytest.mark.filterwarnings("ignore::agentuq_nb.io.input_warnings.InputDataWarning")


@pytest.fixture(scope="module")
def runs(tmp_path_factory) -> list[Path]:
    folder = tmp_path_factory.mktemp("hostile_detector_runs")
    return [write_run(folder / f"agent{i}.json", f"agent{i}", "airline", seed=i) for i in range(3)]


@pytest.fixture(scope="module")
def detectors(runs, tmp_path_factory) -> dict[str, Path]:
    """A logistic detector on text, hash embeddings and length, and a GBM on text and length (within-run on two folds
    by task: the folders' contents, not the protocol, are what the tests edit)."""
    from agentuq_nb.steps.train_detector import train_detector

    root = tmp_path_factory.mktemp("hostile_detectors")
    common = dict(embedder="hash", n_boot=0, protocols=["within_run"], n_splits=2)
    return {"logistic": train_detector(runs, root / "logistic", groups=["text", "embeddings", "length"],
                                       **common).path,
            "gbm": train_detector(runs, root / "gbm", groups=["text", "length"], model="gbm", **common).path}


def read_arrays(folder: Path) -> dict[str, np.ndarray]:
    with np.load(folder / "arrays.npz", allow_pickle=False) as npz:
        return {name: npz[name] for name in npz.files}


def resign(folder: Path, target: Path, *, card=None, model=None, arrays=None, arrays_bytes: bytes | None = None) -> Path:
    """A copy of ``folder`` at ``target`` with the card, model.json or arrays replaced and every hash made to match."""
    shutil.copytree(folder, target)
    stored = json.loads((target / "card.json").read_text())
    if model is not None:
        (target / "model.json").write_text(json.dumps(model))  # NaN and Infinity written as Python's json reads them
    if arrays is not None:
        buffer = io.BytesIO()
        np.savez_compressed(buffer, **arrays)
        arrays_bytes = buffer.getvalue()
    if arrays_bytes is not None:
        (target / "arrays.npz").write_bytes(arrays_bytes)
    stored = card if card is not None else stored
    for name in stored["files"]:
        stored["files"][name] = hashlib.sha256((target / name).read_bytes()).hexdigest()
    stored["card_sha256"] = canonical_hash(stored)
    (target / "card.json").write_text(json.dumps(stored))
    return target


def edited(folder: Path, target: Path, edit) -> Path:
    """``edit(card, model, arrays)`` applied in place to the folder's parsed parts, then re-signed."""
    card = json.loads((folder / "card.json").read_text())
    model = json.loads((folder / "model.json").read_text())
    arrays = read_arrays(folder)
    edit(card, model, arrays)
    return resign(folder, target, card=card, model=model, arrays=arrays)


def header_bomb(arrays: dict[str, np.ndarray], member: str, shape: tuple[int, ...]) -> bytes:
    """An archive whose ``member`` is a tiny ``.npy`` whose header claims ``shape`` (numpy would allocate it first)."""
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", zipfile.ZIP_DEFLATED) as archive:
        for name, value in arrays.items():
            one = io.BytesIO()
            np.save(one, value)
            data = one.getvalue()
            if name == member:
                header = repr({"descr": "<f8", "fortran_order": False, "shape": shape}).encode()
                header += b" " * (-(len(header) + 11) % 64) + b"\n"
                data = b"\x93NUMPY\x01\x00" + struct.pack("<H", len(header)) + header + b"\0" * 4096
            archive.writestr(f"{name}.npy", data)
    return buffer.getvalue()


def set_path(tree, path, value):
    for key in path[:-1]:
        tree = tree[key]
    tree[path[-1]] = value


# (detector, edit, file, what the one line says)
CASES = {
    "a NaN weight": ("logistic", lambda c, m, a: a["final.full.coef"].__setitem__(0, np.nan), "arrays.npz",
                     r"final\.full\.coef: holds a value that is not a finite number"),
    "an infinite scale": ("logistic", lambda c, m, a: a["final.full.scale"].__setitem__(1, np.inf), "arrays.npz",
                          r"final\.full\.scale: holds a value that is not a finite number"),
    "a zero scale": ("logistic", lambda c, m, a: a["final.full.scale"].__setitem__(1, 0.0), "arrays.npz",
                     r"final\.full\.scale: holds a scale that is not positive"),
    "a huge weight": ("logistic", lambda c, m, a: a["final.full.coef"].__setitem__(0, 1e300), "arrays.npz",
                      r"final\.full\.coef: holds a value that is not a finite number within"),
    "an infinite intercept": ("logistic", lambda c, m, a: m["final"]["full"].__setitem__("intercept", float("inf")),
                              "model.json", r"final\.full\.intercept: Input should be a finite number"),
    "a text intercept": ("logistic", lambda c, m, a: m["final"]["full"].__setitem__("intercept", "x"), "model.json",
                         r"final\.full\.intercept: Input should be a valid number"),
    "a NaN calibration slope": ("logistic", lambda c, m, a: m["final_calibration"].__setitem__("a", float("nan")),
                                "model.json", r"final_calibration\.a: Input should be a finite number"),
    "a calibration constant above 1": ("logistic", lambda c, m, a: m.__setitem__("final_calibration",
                                                                                  {"constant": 2.0, "n": 3}),
                                       "model.json", r"final_calibration\.constant: Input should be less than"),
    "a leave-one-run-out map of NaN": ("logistic", lambda c, m, a: m["loro"][1]["calibration"].__setitem__(
        "b", float("-inf")), "model.json", r"loro\.1\.calibration\.b: Input should be a finite number"),
    "weights as text": ("logistic", lambda c, m, a: a.__setitem__("final.full.coef", a["final.full.coef"].astype(str)),
                        "arrays.npz", r"final\.full\.coef: is <U\d+ of 1 dimension\(s\), not float64"),
    "weights of another shape": ("logistic", lambda c, m, a: a.__setitem__("final.full.coef", a["final.full.coef"][:-1]),
                                 "arrays.npz", r"final\.full\.coef: has shape \(\d+,\), expected"),
    "weights as a matrix": ("logistic", lambda c, m, a: a.__setitem__("final.full.coef", a["final.full.coef"][None, :]),
                            "arrays.npz", r"final\.full\.coef: is float64 of 2 dimension\(s\)"),
    "no final model": ("logistic", lambda c, m, a: m.pop("final"), "model.json", r"final: Field required"),
    "runs as a number": ("logistic", lambda c, m, a: m.__setitem__("runs", 3), "model.json",
                         r"runs: Input should be a valid list"),
    "a leave-one-run-out entry as text": ("logistic", lambda c, m, a: m.__setitem__("loro", ["abc"]), "model.json",
                                          r"loro\.0: Input should be a valid dictionary"),
    "a run left out twice": ("logistic", lambda c, m, a: m["loro"][1].__setitem__("run", m["loro"][0]["run"]),
                             "model.json", r"loro\.1\.run: .* is named twice"),
    "dense names as text": ("logistic", lambda c, m, a: m["final"]["full"].__setitem__("dense_names", "length"),
                            "model.json", r"final\.full\.dense_names: Input should be a valid list"),
    "a column the extraction never makes": ("logistic", lambda c, m, a: m["final"]["full"]["dense_names"].__setitem__(
        0, "os.system"), "model.json", r"final\.full\.dense_names: 'os\.system' is not a column the extraction makes"),
    "max_tokens of a billion": ("logistic", lambda c, m, a: c["embedder"].__setitem__("max_tokens", 10**9),
                                "card.json", r"embedder\.max_tokens: Input should be less than or equal to 512"),
    "max_tokens as text": ("logistic", lambda c, m, a: c["embedder"].__setitem__("max_tokens", "128"),
                           "card.json", r"embedder\.max_tokens: Input should be a valid integer"),
    "another embedder named": ("logistic", lambda c, m, a: c["embedder"].__setitem__("name", "minilm"), "model.json",
                               r"final\.full\.dense_names: embedding\.agent_mean has 256 dimensions where the card's "
                               r"embedder 'minilm' makes 384"),
    "an unknown embedder": ("logistic", lambda c, m, a: c["embedder"].__setitem__("name", "../evil"), "card.json",
                            r"embedder\.name: Input should be 'minilm'"),
    "groups not the model's": ("logistic", lambda c, m, a: c.__setitem__("feature_groups", ["text", "length"]),
                               "model.json", r"final\.full\.settings\.groups: .* are not the card's feature_groups"),
    "an unknown group": ("logistic", lambda c, m, a: c.__setitem__("feature_groups", ["text", "dns"]), "card.json",
                         r"feature_groups: "),
    "fingerprints as floats": ("logistic", lambda c, m, a: a.__setitem__("fingerprints", a["fingerprints"] * 1.0),
                               "arrays.npz", r"fingerprints: is float64"),
    "a GBM node its own right child": ("gbm", lambda c, m, a: a["final.full.tree_nodes"]["right"].__setitem__(0, 0),
                                       "arrays.npz", r"final\.full\.tree_nodes: tree 0: a node refers to a node the tree "
                                                     r"does not have, or to one not after it \(a cycle\)"),
    "a GBM node pointing back": ("gbm", lambda c, m, a: a["final.full.tree_nodes"]["left"].__setitem__(
        int(np.flatnonzero(~a["final.full.tree_nodes"]["is_leaf"].astype(bool))[-1]), 0), "arrays.npz",
                                 r"final\.full\.tree_nodes: tree \d+: a node refers to"),
    "a NaN leaf": ("gbm", lambda c, m, a: a["final.full.tree_nodes"]["value"].__setitem__(-1, np.nan), "arrays.npz",
                   r"final\.full\.tree_nodes: hold a leaf value that is not a finite number"),
    "tree sizes that lie": ("gbm", lambda c, m, a: a["final.full.tree_sizes"].__setitem__(0, 10**12), "arrays.npz",
                            r"final\.full\.tree_sizes: do not add up"),
    "occlusion of another shape": ("gbm", lambda c, m, a: a.__setitem__("final.full.occlusion", np.zeros(1)),
                                   "arrays.npz", r"final\.full\.occlusion: has shape \(1,\), expected"),
    "more trees than records": ("gbm", lambda c, m, a: m["final"]["full"].__setitem__("n_trees", 10**9), "arrays.npz",
                                r"final\.full\.tree_sizes: do not add up"),
    # the selection's own fields (evaluation/detector_selection.py): the GBM detector's final model is stacked on the
    # full model, the length model and the task prior
    "an unknown candidate": ("logistic", lambda c, m, a: m["final"].__setitem__("candidate", "os.system"),
                             "model.json", r"final\.candidate: Input should be 'length'"),
    "a NaN recalibration": ("logistic", lambda c, m, a: m["final"]["recalibration"].__setitem__("a", float("nan")),
                            "model.json", r"final\.recalibration\.a: Input should be a finite number"),
    "a recalibration that reverses the order": ("logistic", lambda c, m, a: m["final"]["recalibration"].__setitem__(
        "a", -1.0), "model.json", r"final\.recalibration\.a: Input should be greater than 0"),
    "reference values that lie": ("logistic", lambda c, m, a: a.__setitem__("final.reference",
                                                                            a["final.reference"][:-1]),
                                  "arrays.npz", r"final\.reference: holds \d+ values for \d+ reference_names"),
    "a stacking weight as text": ("gbm", lambda c, m, a: m["final"]["stack"].__setitem__("full", "x"), "model.json",
                                  r"final\.stack\.full: Input should be a valid number"),
    "a stacking weight of an unknown part": ("gbm", lambda c, m, a: m["final"]["stack"].__setitem__("evil", 1.0),
                                             "model.json", r"final\.stack: holds .*an intercept and weights of"),
    "a length model on another column": ("gbm", lambda c, m, a: a.__setitem__("final.length.column",
                                                                              np.array(["os.system"])),
                                         "arrays.npz", r"final\.length\.column: 'os\.system' is not a length"),
    "an infinite length slope": ("gbm", lambda c, m, a: a["final.length.coef"].__setitem__(0, np.inf), "arrays.npz",
                                 r"final\.length\.coef: holds a value that is not a finite number"),
    "a task failing more often than it ran": ("gbm", lambda c, m, a: a["final.prior.failures"].__setitem__(0, 1e5),
                                              "arrays.npz", r"final\.prior\.tasks: the task prior's tasks, failures "
                                                            r"and counts do not agree"),
    "a task prior's rate above 1": ("gbm", lambda c, m, a: a["final.prior.rate"].__setitem__(0, 2.0), "arrays.npz",
                                    r"final\.prior\.rate: is not one failure rate in \[0, 1\]"),
    "a stacked model without its task prior": ("gbm", lambda c, m, a: [a.pop(k) for k in list(a)
                                                                       if k.startswith("final.prior.")],
                                               "arrays.npz", r"final\.prior: is missing: the stacked detector reads it"),
    "a fallback on a model that is not a task prior": ("gbm", lambda c, m, a: m["final"].__setitem__(
        "fallback", {"candidate": "length"}), "model.json", r"final\.fallback: only a task prior falls back"),
}


@pytest.mark.parametrize("case", list(CASES))
def test_a_hostile_detector_folder_is_refused_in_one_line_naming_the_file_and_field(detectors, tmp_path, case):
    which, edit, file, message = CASES[case]
    folder = edited(detectors[which], tmp_path / "det", edit)
    with pytest.raises(InputError, match=message) as refused:
        load_detector(folder)
    assert str(refused.value).startswith(f"{folder / file}: ") and "\n" not in str(refused.value)


@pytest.mark.parametrize("shape", [(10**9,), (2**40, 2**30), (-1,)])
def test_an_array_header_claiming_more_than_its_member_holds_is_refused_before_numpy_allocates_it(detectors, tmp_path,
                                                                                                  shape):
    """A 4 KiB member whose header claims 8 GB (numpy allocates the header's shape before it reads the data) is refused
    from its header alone, whatever the shape's product."""
    import tracemalloc

    arrays = read_arrays(detectors["logistic"])
    folder = resign(detectors["logistic"], tmp_path / "det",
                    arrays_bytes=header_bomb(arrays, "final.full.coef", shape))
    tracemalloc.start()
    try:
        with pytest.raises(InputError, match=r"arrays\.npz: member final\.full\.coef\.npy: ") as refused:
            load_detector(folder)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert "header claims" in str(refused.value) or "not an array's" in str(refused.value)
    assert peak < 64 << 20  # well below the 8 GB the header claims (a handful of MB of real arrays)


def test_an_object_or_zero_width_member_is_refused_from_its_header(detectors, tmp_path):
    """Elements of no bytes (a billion of them iterated for nothing) and objects (pickle) are refused by the header."""
    arrays = read_arrays(detectors["logistic"])
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as archive:
        for name, value in arrays.items():
            one = io.BytesIO()
            np.save(one, value)
            archive.writestr(f"{name}.npy", one.getvalue())
        header = repr({"descr": "<U0", "fortran_order": False, "shape": (10**15,)}).encode()
        header += b" " * (-(len(header) + 11) % 64) + b"\n"
        archive.writestr("final.more.npy", b"\x93NUMPY\x01\x00" + struct.pack("<H", len(header)) + header)
    folder = resign(detectors["logistic"], tmp_path / "det", arrays_bytes=buffer.getvalue())
    with pytest.raises(InputError, match=r"member final\.more\.npy: has the shape \(1000000000000000,\) of <U0"):
        load_detector(folder)
    pickled = io.BytesIO()
    np.save(pickled, np.array([{"os": "system"}], dtype=object), allow_pickle=True)
    with zipfile.ZipFile(io.BytesIO(buffer.getvalue()), "r") as source, zipfile.ZipFile(
            buffer := io.BytesIO(), "w") as archive:
        for info in source.infolist():
            if info.filename != "final.more.npy":
                archive.writestr(info, source.read(info))
        archive.writestr("final.evil.npy", pickled.getvalue())
    folder = resign(detectors["logistic"], tmp_path / "det2", arrays_bytes=buffer.getvalue())
    with pytest.raises(InputError, match=r"no pickle is loaded\): member final\.evil\.npy holds objects"):
        load_detector(folder)


def test_many_leave_one_run_out_entries_are_refused_or_read_without_rereading_the_arrays(detectors, tmp_path):
    """Each entry's arrays are found by one pass over the archive (loading is linear in the folder); entries that
    name runs the model does not have are refused by their index."""
    def many(card, model, arrays):
        entry = model["loro"][0]
        model["loro"] = [dict(entry, run=f"run{i}") for i in range(2000)]

    folder = edited(detectors["logistic"], tmp_path / "det", many)
    with pytest.raises(InputError, match=r"model\.json: loro\.0\.run: 'run0' is not one of the runs"):
        load_detector(folder)


def test_predict_says_one_line_on_a_hostile_detector_and_extracts_nothing(detectors, runs, tmp_path):
    folder = edited(detectors["gbm"], tmp_path / "det",
                    lambda c, m, a: a["final.full.tree_nodes"]["right"].__setitem__(0, 0))
    code, out, err = run_cli("predict", folder, runs[0], "--out", tmp_path / "run")
    assert_ended_cleanly(code, out, err)
    assert code == 2 and "a node refers to a node the tree does not have" in err
    assert not (tmp_path / "run").exists()


def test_an_untouched_detector_still_loads_and_predicts_finite_probabilities(detectors, runs):
    from agentuq_nb.evaluation.detector_inputs import corpus_features, resolve_sources

    for folder in detectors.values():
        detector = load_detector(folder)
        features = corpus_features(resolve_sources(runs[:1]), detector.groups, detector.embedder)
        p = detector.predict(features)["failure_probability"].to_numpy(dtype=float)
        assert np.isfinite(p).all() and ((p >= 0) & (p <= 1)).all()


# --------------------------------------------------------------------------- hunting: any value anywhere
JSON_VALUES = st.recursive(st.none() | st.booleans() | st.integers(-10**12, 10**12) | st.floats() | st.text(max_size=8),
                           lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=4), inner,
                                                                                       max_size=3), max_leaves=6)


def json_paths(tree, prefix=()):
    """Every path to a value of a JSON tree (bounded: the first entries of long lists)."""
    out = [prefix] if prefix else []
    if isinstance(tree, dict):
        for key, value in tree.items():
            out += json_paths(value, (*prefix, key))
    elif isinstance(tree, list):
        for i, value in enumerate(tree[:3]):
            out += json_paths(value, (*prefix, i))
    return out


ARRAY_VALUES = st.sampled_from([np.float64, np.float32, np.int64, np.int8, np.bool_, "<U3"]).flatmap(
    lambda dtype: st.lists(st.sampled_from([0, 1, 2, 7]), min_size=0, max_size=2).map(tuple).flatmap(
        lambda shape: st.sampled_from([0.0, 1.0, -1.0, np.nan, np.inf, 1e308]).map(
            lambda fill: np.full(shape, fill).astype(dtype) if dtype != "<U3" else np.full(shape, "x", dtype=dtype))))


FEATURES: dict = {}


def hunting_features(results: Path, groups: tuple[str, ...]):
    """The features of one run for ``groups`` (hash embeddings), extracted once per set of groups."""
    from agentuq_nb.evaluation.detector_inputs import corpus_features, resolve_sources

    key = (str(results), tuple(groups))
    if key not in FEATURES:
        FEATURES[key] = corpus_features(resolve_sources([results]), groups, "hash")
    return FEATURES[key]


@settings(max_examples=50, deadline=None, derandomize=True,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.data())
def test_hunting_any_edit_of_a_detector_folder_loads_and_predicts_in_range_or_is_refused_in_one_line(
        detectors, runs, tmp_path_factory, data):
    which = data.draw(st.sampled_from(sorted(detectors)))
    folder = detectors[which]
    card = json.loads((folder / "card.json").read_text())
    model = json.loads((folder / "model.json").read_text())
    arrays = read_arrays(folder)
    where = data.draw(st.sampled_from(["card", "model", "array"]))
    if where == "array":
        name = data.draw(st.sampled_from(sorted(arrays)))
        arrays[name] = data.draw(ARRAY_VALUES)
    else:
        tree = card if where == "card" else model
        paths = [p for p in json_paths(tree) if where == "model" or p[0] in ("embedder", "feature_groups", "settings")]
        set_path(tree, data.draw(st.sampled_from(paths)), data.draw(JSON_VALUES))
    target = tmp_path_factory.mktemp("hunt") / "det"
    try:
        hostile = resign(folder, target, card=card, model=model, arrays=arrays)
    except ValueError:  # a card holding NaN has no canonical hash: such a card cannot be signed, nor read
        return
    try:
        detector = load_detector(hostile)
    except InputError as err:
        assert "\n" not in str(err) and str(err).startswith(str(hostile))
        event(f"refused: {where}")
        return
    event(f"loaded: {where}")
    features = hunting_features(runs[0], detector.groups)
    p = detector.predict(features)["failure_probability"].to_numpy(dtype=float)
    assert ((p >= 0) & (p <= 1)).all()  # NaN nowhere: the numbers a prediction is made of are finite


# --------------------------------------------------------------------------- the detector commands' outputs and inputs
def directory_layout(results: Path, target: Path) -> Path:
    """``results`` (a τ²-bench v0 file) as a results directory: results.json and simulations/<id>.json."""
    raw = json.loads(results.read_text())
    (target / "simulations").mkdir(parents=True)
    (target / "results.json").write_text(json.dumps({k: v for k, v in raw.items() if k != "simulations"}))
    for sim in raw["simulations"]:
        (target / "simulations" / f"{sim['id']}.json").write_text(json.dumps(sim))
    return target


FAST = ("--embedder", "hash", "--group", "length", "--n-boot", "0", "--n-splits", "2", "--protocol", "within_run")


def test_train_detector_out_refuses_what_is_not_a_detectors_and_replaces_foreign_files_only_with_force(runs, tmp_path):
    """A directory named card.json (or arrays.npz holding a file) is not a card: refused, kept whole, even with
    --force; someone else's card.json and model.json are replaced only with --force."""
    for entry in ("card.json", "arrays.npz"):
        out = tmp_path / f"dir_{entry}"
        (out / entry / "sub").mkdir(parents=True)
        (out / entry / "sub" / "keep.txt").write_text("mine")
        if entry != "card.json":
            (out / "card.json").write_text("{}")
        for force in ((), ("--force",)):
            code, stdout, stderr = run_cli("train-detector", *runs, "--out", out, *FAST, *force)
            assert_ended_cleanly(code, stdout, stderr)
            assert code == 2 and f"{entry}: is a directory" in stderr, stderr
            assert (out / entry / "sub" / "keep.txt").read_text() == "mine"
    foreign = tmp_path / "foreign"
    foreign.mkdir()
    (foreign / "card.json").write_text(json.dumps({"owner": "someone else"}))
    (foreign / "model.json").write_text("{}")
    code, stdout, stderr = run_cli("train-detector", *runs, "--out", foreign, *FAST)
    assert_ended_cleanly(code, stdout, stderr)
    assert code == 2 and "card.json: exists and was not made by 'train-detector'" in stderr and "--force" in stderr
    assert json.loads((foreign / "card.json").read_text()) == {"owner": "someone else"}
    code, stdout, stderr = run_cli("train-detector", *runs, "--out", foreign, *FAST, "--force")
    assert code == 0, stderr
    assert load_detector(foreign).card["n_runs"] == 3
    code, stdout, stderr = run_cli("train-detector", *runs[:2], "--out", foreign, *FAST)  # its own: replaced
    assert code == 0 and load_detector(foreign).card["n_runs"] == 2, stderr


def test_train_detector_out_is_never_inside_an_input_nor_the_current_folder(runs, tmp_path, monkeypatch):
    results = directory_layout(runs[0], tmp_path / "results_dir")
    before = sorted(p.name for p in results.rglob("*"))
    code, stdout, stderr = run_cli("train-detector", results, *runs[1:], "--out", results / "det", *FAST)
    assert_ended_cleanly(code, stdout, stderr)
    assert code == 2 and "an input of 'train-detector'" in stderr, stderr
    assert sorted(p.name for p in results.rglob("*")) == before
    empty = tmp_path / "empty"
    empty.mkdir()
    monkeypatch.chdir(empty)
    code, stdout, stderr = run_cli("train-detector", *runs, "--out", ".", *FAST)
    assert_ended_cleanly(code, stdout, stderr)
    assert code == 2 and "is the current folder" in stderr and not any(empty.iterdir())


def test_predict_and_analyze_never_write_into_another_run_the_detector_or_the_results(detectors, runs, tmp_path):
    from agentuq_nb.steps.extract import extract

    other = tmp_path / "other_run"
    extract(runs[1], other)
    before = (other / "trajectories.parquet").read_bytes()
    for args in (("predict", detectors["logistic"], runs[0], "--out", other), ("analyze", runs[0], "--out", other)):
        code, stdout, stderr = run_cli(*args)
        assert_ended_cleanly(code, stdout, stderr)
        assert code == 2 and "holds another run" in stderr, stderr
    assert (other / "trajectories.parquet").read_bytes() == before
    code, stdout, stderr = run_cli("predict", detectors["logistic"], runs[0], "--out", detectors["logistic"])
    assert code == 2 and "an input of 'predict'" in stderr, stderr
    load_detector(detectors["logistic"])  # untouched
    results = directory_layout(runs[0], tmp_path / "results_dir")
    code, stdout, stderr = run_cli("extract", results, "--out", results / "run")
    assert code == 2 and "inside" in stderr and not (results / "run").exists(), stderr
    extract(runs[1], other)  # the same results again: the same run, fine


def test_the_same_results_twice_count_once_whatever_their_name_and_special_files_are_refused(runs, tmp_path):
    """A copy or a symlink of a run's results is the same run (identity by content, not by file name); a FIFO or a
    /dev/zero symlink in a results directory is refused by the safe reader, never read."""
    import os

    from agentuq_nb.evaluation.detector_inputs import resolve_sources

    copy = tmp_path / "copy_of_agent0.json"
    shutil.copy(runs[0], copy)
    link = tmp_path / "link.json"
    link.symlink_to(runs[0])
    for twin in (copy, link):
        with pytest.raises(InputError, match=f"holds the same results as {runs[0]}: each run counts once"):
            resolve_sources([runs[0], runs[1], twin])
    for special in ("fifo", "zero"):
        results = directory_layout(runs[0], tmp_path / f"dir_{special}")
        planted = results / "simulations" / "zz.json"
        os.mkfifo(planted) if special == "fifo" else planted.symlink_to("/dev/zero")
        code, stdout, stderr = run_cli("train-detector", results, runs[1], "--out", tmp_path / f"det_{special}", *FAST)
        assert_ended_cleanly(code, stdout, stderr)
        assert code == 2 and "not a regular file" in stderr, stderr


def test_predict_refuses_a_run_whose_results_changed_since_extracted(detectors, runs, tmp_path):
    from agentuq_nb.steps.predict import predict

    results = tmp_path / "agent0.json"
    shutil.copy(runs[0], results)
    predict(detectors["logistic"], results, tmp_path / "run", n_boot=0)
    raw = json.loads(results.read_text())
    raw["simulations"][0]["messages"][-2]["content"] = "Changed afterwards."
    results.write_text(json.dumps(raw))
    with pytest.raises(InputError, match=r"not the results .* was made from"):
        predict(detectors["logistic"], tmp_path / "run", n_boot=0)


def test_train_detector_on_one_run_works_and_repeated_keys_are_named(runs, tmp_path):
    """One labelled run is a documented path (calibrated within it; no ECE across runs: said as n/a, no crash); two
    trajectories with one (task, trial, seed) are refused naming the file."""
    code, stdout, stderr = run_cli("train-detector", runs[0], "--out", tmp_path / "one", "--embedder", "hash",
                                   "--group", "length", "--group", "text", "--n-boot", "0", "--n-splits", "2")  # every protocol
    assert code == 0, stderr
    assert load_detector(tmp_path / "one").card["n_runs"] == 1
    raw = json.loads(runs[1].read_text())
    raw["simulations"].append({**raw["simulations"][0], "id": "twin"})
    twice = tmp_path / "twice.json"
    twice.write_text(json.dumps(raw))
    code, stdout, stderr = run_cli("train-detector", runs[0], twice, "--out", tmp_path / "det", *FAST)
    assert_ended_cleanly(code, stdout, stderr)
    assert code == 2 and f"{twice}: holds 2 labelled trajectories whose (task, trial, seed)" in stderr, stderr


def test_a_path_beginning_with_a_fields_name_stays_a_path_in_a_message(runs, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    code, stdout, stderr = run_cli("analyze", "embedder/x.json", "--out", tmp_path / "run")
    assert_ended_cleanly(code, stdout, stderr)
    assert code == 2 and "error: embedder/x.json: " in stderr and "--embedder/x.json" not in stderr, stderr


def test_rescore_limit_past_any_run_is_refused_before_the_model_loads(runs, tmp_path):
    code, stdout, stderr = run_cli("rescore", runs[0], "--out", tmp_path / "run", "--limit", str(10**20))
    assert_ended_cleanly(code, stdout, stderr)
    assert code == 2 and "--limit" in stderr and "less than or equal to 1000000000" in stderr, stderr
    assert not (tmp_path / "run").exists()


def test_a_bad_notebook_parameter_is_one_line_naming_it_before_the_work(runs, tmp_path):
    from agentuq_nb.pipeline.detector_study import run_study

    with pytest.raises(ValueError, match=r"^notebook parameter n_boot: Input should be greater than or equal to 0 "
                                         r"\(given -5\)$"):
        run_study([str(r) for r in runs], tmp_path / "study", n_boot=-5, embedder="hash")
    assert not (tmp_path / "study").exists()


# --------------------------------------------------------------------------- secrets, by key and by shape
SHAPED = "sk-proj-Ab3dEf6hIj9kLm2nOp5qRs8tUv1wXy4z"


def test_the_page_masks_by_key_and_by_shape_and_its_lookups_still_find_each_task():
    """A value under a secret-named key is masked whatever its shape; a key-shaped task id and scorer name are masked
    as keys exactly as where they are values, so the page's panels still find them."""
    from agentuq_nb.figures.explorer import masked_page_data

    data = {"estimators": [{"name": SHAPED, "label": SHAPED}], "sort": SHAPED,
            "tasks": {SHAPED: {"instructions": "Cancel."}, "2": {"instructions": "Book."}},
            "trajectories": [{"task_id": SHAPED, "scores": {SHAPED: 0.4}, "messages": [
                {"text": 'get_user({"password": "hunter2hunter2", "city": "Paris"})', "tokens": [["hi", -0.1, []]],
                 "calls": [{"name": "get_user", "args": json.dumps({"password": "hunter2hunter2",
                                                                    "api_key": "plain words", "city": "Paris"})}]}],
             "key": "0|airline|1|0|7"},
                {"task_id": "2", "scores": {SHAPED: 0.1}, "messages": [], "key": "0|airline|2|0|7"}]}
    masked = masked_page_data(data)
    text = json.dumps(masked)
    assert "hunter2hunter2" not in text and SHAPED not in text and "plain words" not in text
    assert "Paris" in text and masked["trajectories"][0]["messages"][0]["tokens"] == [["hi", -0.1, []]]
    assert [t["key"] for t in masked["trajectories"]] == ["0|airline|1|0|7", "0|airline|2|0|7"]  # structure kept
    for t in masked["trajectories"]:
        assert t["task_id"] in masked["tasks"] and set(t["scores"]) == {masked["estimators"][0]["name"]}
    assert masked["sort"] == masked["estimators"][0]["name"]
    from agentuq_nb.common.redaction import mask_secrets

    assert mask_secrets({"params": {"api_key": "plain words", "auth": {"user": "me"}, "n": 3}})[0] == {
        "params": {"api_key": "***", "auth": {"user": "***"}, "n": 3}}  # a notebook's data: by key too


def test_a_key_shaped_tool_name_never_reaches_a_detector_folder_or_predictions(tmp_path):
    from agentuq_nb.steps.predict import predict
    from agentuq_nb.steps.train_detector import train_detector

    runs = []
    for i in range(2):
        raw = json.loads(write_run(tmp_path / f"r{i}.json", f"agent{i}", seed=i).read_text())
        for sim in raw["simulations"]:
            for m in sim["messages"]:
                for call in m.get("tool_calls") or []:
                    call["name"] = SHAPED
                    call["arguments"] = {"ghp_A1b2C3d4E5f6G7h8I9j0K1l2M3n4O5p6Q7r8": 1}
        (tmp_path / f"r{i}.json").write_text(json.dumps(raw))
        runs.append(tmp_path / f"r{i}.json")
    trained = train_detector(runs, tmp_path / "det", embedder="hash", groups=["text", "length"], n_boot=0,
                             protocols=["within_run"], n_splits=2, min_tasks=1)
    detector = load_detector(trained.path)
    fulls = [m.full for m in (detector.final, *(model for model, _ in detector.loro.values())) if m.full is not None]
    assert fulls and any(t.startswith("call:***") for full in fulls for t in full.terms)
    predict(trained.path, runs[0], tmp_path / "run", n_boot=0)
    for folder in (trained.path, tmp_path / "run"):
        for path in folder.rglob("*"):
            if path.is_file() and path.suffix in (".json", ".csv"):
                assert SHAPED not in path.read_text() and "ghp_A1b2" not in path.read_text(), path


# --------------------------------------------------------------------------- hunting: what --out may replace
ENTRY_NAMES = ["card.json", "model.json", "arrays.npz", "protocols.csv", "notes.txt"]
ENTRY_KINDS = ["file", "directory", "symlink", "fifo"]


@settings(max_examples=80, deadline=None, derandomize=True,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(entries=st.dictionaries(st.sampled_from(ENTRY_NAMES), st.sampled_from(ENTRY_KINDS), max_size=4),
       own=st.booleans(), force=st.booleans())
def test_hunting_train_detector_out_accepts_only_a_detectors_own_regular_files(detectors, tmp_path_factory, entries,
                                                                               own, force):
    """Whatever a folder holds, --out is accepted only when replacing it loses nothing that is not a detector's: no
    entry but a detector's names, each a regular file, each the detector's own (its card's hashes) unless --force."""
    import os

    from agentuq_nb.io.store.detector_dir import FILES, check_destination, made_by_train_detector

    out = tmp_path_factory.mktemp("hunt_out") / "det"
    if own:
        shutil.copytree(detectors["logistic"], out)
    else:
        out.mkdir()
    for name, kind in entries.items():
        path = out / name
        if path.exists():
            os.unlink(path)
        if kind == "file":
            path.write_text("someone's")
        elif kind == "directory":
            (path / "keep").mkdir(parents=True)
        elif kind == "symlink":
            path.symlink_to(detectors["logistic"] / "card.json")
        else:
            os.mkfifo(path)
    names = {p.name: p for p in out.iterdir()}
    try:
        check_destination(out, force=force)
    except InputError as err:
        assert "\n" not in str(err)
        return
    assert set(names) <= {"card.json", *FILES}
    assert not names or "card.json" in names
    for path in names.values():
        assert path.is_file() and not path.is_symlink()
        assert force or made_by_train_detector(path)

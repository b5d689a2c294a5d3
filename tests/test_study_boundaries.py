"""``reproduce`` stays inside the project, leaks no key into an executed notebook, and shows a
notebook's progress in the terminal while it runs (issue 15: points 5, 6, 11)."""
from __future__ import annotations

import json
from pathlib import Path

import nbformat
import pytest
import yaml

from agentuq_nb.io.errors import InputError
from agentuq_nb.pipeline.notebook_run import ProgressRelay
from agentuq_nb.pipeline.reproduce import Study, load_studies, run_study

ENV_KEY = "env-key-value-never-to-be-written-42"
SHAPED_KEY = "sk-proj-" + "abcdefghij0123456789KLMNOPQR"


def write_params(path: Path, spec: dict) -> Path:
    path.write_text(yaml.safe_dump(spec))
    return path


def project(tmp_path: Path, cells: list[str]) -> Path:
    """A project folder with one notebook ``probe`` (a parameters cell, then ``cells``)."""
    root = tmp_path / "project"
    (root / "notebooks").mkdir(parents=True)
    (root / "params").mkdir()
    nb = nbformat.v4.new_notebook()
    params = nbformat.v4.new_code_cell("run_dir = 'runs/x'\nfigures_dir = 'figures/x'\nnote = ''")
    params.metadata["tags"] = ["parameters"]
    nb.cells = [params, *map(nbformat.v4.new_code_cell, cells)]
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
    nbformat.write(nb, root / "notebooks" / "probe.ipynb")
    return root


@pytest.mark.parametrize("notebook", ["../outside", "/tmp/outside", "sub/probe", "..", ".hidden"])
def test_a_notebook_named_by_path_is_refused(tmp_path, notebook):
    params = write_params(tmp_path / "s.yaml", {"notebooks": [notebook]})
    with pytest.raises(InputError, match=r"s.yaml: notebook .* must be a plain name.*\(at notebooks\[0\]\.name"):
        load_studies(params)


@pytest.mark.parametrize("name", ["../escape", "/tmp/escape", "a/b", "..", "x/../../y"])
def test_a_study_name_that_leaves_runs_and_figures_is_refused(tmp_path, name):
    params = write_params(tmp_path / "s.yaml", {"name": name, "notebooks": ["04_evaluate"]})
    with pytest.raises(InputError, match=r"study name .* must be a plain name.*\(at name"):
        load_studies(params)
    # the file's name is the default study name: checked the same way
    odd = write_params(tmp_path / "...yaml", {"notebooks": ["04_evaluate"]})
    with pytest.raises(InputError, match="must be a plain name"):
        load_studies(odd)


def test_a_study_built_in_code_still_cannot_run_outside_the_project(tmp_path):
    root = project(tmp_path, ["print('ran')"])
    (tmp_path / "outside.ipynb").write_bytes((root / "notebooks" / "probe.ipynb").read_bytes())
    escape = Study(name="../../escaped", params_path=tmp_path / "s.yaml", notebooks=[("probe", {})])
    with pytest.raises(InputError, match="is outside .*runs"):
        run_study(escape, root=root, log=lambda *_: None)
    outside = Study(name="ok", params_path=tmp_path / "s.yaml", notebooks=[("../../outside", {})])
    with pytest.raises(InputError, match="is outside .*notebooks"):
        run_study(outside, root=root, log=lambda *_: None)
    assert not (tmp_path / "escaped").exists() and not (root / "runs" / "ok" / "notebooks" / "outside.ipynb").exists()


@pytest.mark.parametrize("value", [f"Bearer {ENV_KEY}", SHAPED_KEY, f"see https://user:{ENV_KEY}@host/x"])
def test_parameters_holding_keys_are_refused_wherever_they_are(tmp_path, monkeypatch, value):
    monkeypatch.setenv("MY_SERVICE_API_KEY", ENV_KEY)
    for spec in ({"notebooks": ["04_evaluate"], "parameters": {"note": value}},
                 {"notebooks": [{"name": "04_evaluate", "parameters": {"extra": {"args": [value]}}}]},
                 {"notebooks": ["04_evaluate"], "grid": {"note": ["fine", value]}}):
        with pytest.raises(InputError, match="looks like a secret"):
            load_studies(write_params(tmp_path / "leaky.yaml", spec))


def test_an_executed_notebook_keeps_no_key_its_outputs_picked_up(tmp_path, monkeypatch):
    """A key a cell prints (an error message quoting it, a debug print) is masked in the saved copy."""
    monkeypatch.setenv("MY_SERVICE_API_KEY", ENV_KEY)
    root = project(tmp_path, [
        "import os\nprint('key:', os.environ['MY_SERVICE_API_KEY'])",
        f"'{SHAPED_KEY[:4]}' + '{SHAPED_KEY[4:]}'",  # a shaped key as a cell's value (display data)
        "import sys\nprint('Authorization: Bearer ' + os.environ['MY_SERVICE_API_KEY'], file=sys.stderr)",
    ])
    logged: list[str] = []
    study = Study(name="leak", params_path=root / "params" / "leak.yaml", notebooks=[("probe", {})])
    run_dir = run_study(study, root=root, log=logged.append)
    executed = (run_dir / "notebooks" / "probe.ipynb").read_text()
    assert ENV_KEY not in executed and SHAPED_KEY not in executed
    outputs = [o for c in nbformat.reads(executed, as_version=4).cells if c.cell_type == "code" for o in c.outputs]
    assert "key: ***" in outputs[0]["text"] and "***" in json.dumps(outputs[1]["data"])
    assert any("masked 3 output(s) holding an API key" in line for line in logged), logged


def test_a_long_cell_shows_its_progress_in_the_terminal_while_it_runs(tmp_path):
    """The package's text bars (here the job runner's) reach the terminal during the cell, with the
    study and notebook as prefix - not only 'done' at the end."""
    root = project(tmp_path, [
        "import time\nfrom agentuq_nb.distributed import JobRunner\n"
        "JobRunner(label='simulate', desc='simulate demo', unit='sim').run("
        "lambda j: time.sleep(0.6), ((i, i) for i in range(6)), lambda k, r: None, total=6)",
    ])
    logged: list[tuple[float, str]] = []
    import time

    study = Study(name="demo", params_path=root / "params" / "demo.yaml", notebooks=[("probe", {})])
    run_study(study, root=root, log=lambda line: logged.append((time.monotonic(), line)))
    lines = [line for _, line in logged]
    bars = [line for line in lines if line.startswith("[demo] probe: simulate demo:")]
    assert bars and bars[-1].split("|")[-1].strip().startswith("6/6"), lines
    done_at = next(t for t, line in logged if "done in" in line)
    assert len([t for t, line in logged if line in bars and t < done_at]) >= 2, lines  # while it ran


def test_progress_relay_shows_bar_lines_throttled_and_always_the_last():
    shown: list[str] = []
    relay = ProgressRelay("[s] nb:", shown.append, interval=3600)
    relay.write("some warning text\n")
    relay.write("\rsimulate x:   0%|          | 0/3 [00:00<?, ?sim/s]")
    relay.write("\rsimulate x:  33%|###3      | 1/3 [00:01<00:02, 1.0sim/s]")
    relay.write("\rsimulate x: 100%|##########| 3/3 [00:03<00:00, 1.0sim/s]\n")
    relay.close()
    assert shown == ["[s] nb: simulate x:   0%|          | 0/3 [00:00<?, ?sim/s]",
                     "[s] nb: simulate x: 100%|##########| 3/3 [00:03<00:00, 1.0sim/s]"]


def test_progress_relay_shows_a_bar_without_a_total():
    shown: list[str] = []
    relay = ProgressRelay("[s] nb:", shown.append, interval=0)
    relay.write("\rsample actions (K=4): 6traj [08:33, 84.31s/traj]")
    relay.write("\rnot a bar [1]\n")
    assert shown == ["[s] nb: sample actions (K=4): 6traj [08:33, 84.31s/traj]"]


@pytest.mark.parametrize("spec", [
    {"notebooks": ["04_evaluate"], "parameters": {SHAPED_KEY: 1}},
    {"notebooks": ["04_evaluate"], "parameters": {"extra": [{"deep": {SHAPED_KEY: "x"}}]}},
    {"notebooks": ["04_evaluate"], "grid": {SHAPED_KEY: [1]}},
    {"name": SHAPED_KEY, "notebooks": ["04_evaluate"]},
    {"notebooks": ["04_evaluate"], "parameters": {"note": "bearer abcdefgh12345678"}},
    {"notebooks": ["04_evaluate"], "parameters": {"note": "BEARER abcdefgh12345678"}},
])
def test_keys_hidden_in_names_and_mapping_keys_are_refused_too(tmp_path, spec):
    with pytest.raises(InputError, match="looks like a secret"):
        load_studies(write_params(tmp_path / "leaky.yaml", spec))
    assert not (tmp_path / "runs").exists()


def test_a_failing_cell_quoting_a_key_is_reported_without_it(tmp_path, monkeypatch):
    monkeypatch.setenv("MY_SERVICE_API_KEY", ENV_KEY)
    root = project(tmp_path, ["import os\nraise RuntimeError('auth failed for ' + os.environ['MY_SERVICE_API_KEY'])"])
    study = Study(name="fails", params_path=root / "params" / "fails.yaml", notebooks=[("probe", {})])
    with pytest.raises(RuntimeError, match=r"failed in cell \d+: RuntimeError: auth failed for \*\*\*") as err:
        run_study(study, root=root, log=lambda *_: None)
    assert ENV_KEY not in str(err.value) and err.value.__cause__ is None
    assert ENV_KEY not in (root / "runs" / "fails" / "notebooks" / "probe.ipynb").read_text()


def test_the_progress_relay_masks_keys_and_a_refused_study_leaves_no_folder(tmp_path, monkeypatch):
    monkeypatch.setenv("MY_SERVICE_API_KEY", ENV_KEY)
    shown: list[str] = []
    relay = ProgressRelay("[s] nb:", shown.append, interval=0)
    relay.write(f"\rcall {ENV_KEY}:  50%|#####     | 1/2 [00:01<00:01, 1.0it/s]")
    assert shown and ENV_KEY not in shown[0] and "***" in shown[0]
    root = project(tmp_path, ["print('ran')"])
    typo = Study(name="typo", params_path=root / "params" / "typo.yaml", notebooks=[("probe", {"nte": 1})])
    with pytest.raises(InputError, match="declared by none"):
        run_study(typo, root=root, log=lambda *_: None)
    assert not (root / "runs" / "typo").exists()

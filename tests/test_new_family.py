"""A new estimator family with a table of its own is three new files and no edit: its calculator (``uq/``), its
estimator module (``estimators/``) and its step module (``steps/``). In a copy of the package with only those
three files added, the family gets a command made from its config, an artefact the store publishes and recovers
(``<family>_scores.parquet``), the line ``compare-estimators`` prints where a run lacks it, and its rows in the
estimator table once the command has run."""
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

PACKAGE = Path(__file__).resolve().parents[1] / "src" / "agentuq_nb"

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
    run = RunDir.of(run_dir)
    with run.lock(STEP.name):
        scores = longest_message(run.read_frame("messages"), (config.role,))
        with run.commit(STEP.name) as commit:
            commit.write_parquet("longest_message_scores", scores, based_on=run.based_on("messages"))
    return scores


def describe(scores) -> str:
    return f"{len(scores)} trajectories -> longest_message_scores.parquet"
'''


def cli(copy: Path, *args: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(copy)}
    return subprocess.run([sys.executable, "-m", "agentuq_nb.cli", *args], capture_output=True, text=True,
                          timeout=600, env=env, cwd=copy)


def test_a_new_family_with_its_own_table_is_three_files_and_no_edit(tmp_path):
    copy = tmp_path / "src"
    shutil.copytree(PACKAGE, copy / "agentuq_nb", ignore=shutil.ignore_patterns("__pycache__"))
    added = {"uq/longest_message.py": CALCULATOR, "estimators/longest_message.py": ESTIMATOR,
             "steps/longest_message.py": STEP}
    for rel, text in added.items():
        (copy / "agentuq_nb" / rel).write_text(textwrap.dedent(text).lstrip())
    results = write_synthetic_results(tmp_path / "results", num_simulations=12, seed=3)
    run = tmp_path / "run"

    assert cli(copy, "extract", str(results), "--out", str(run)).returncode == 0
    helped = cli(copy, "longest-message", "--help")
    assert helped.returncode == 0 and "--role" in helped.stdout and "the role whose messages" in helped.stdout

    before = cli(copy, "compare-estimators", str(run), "--n-boot", "20", "--embedder", "hash")
    assert before.returncode == 0, before.stderr[-2000:]
    assert f"longest_message (the longest agent message): agentuq-nb longest-message {run}" in before.stderr
    assert "longest_message.max_chars" not in before.stdout

    made = cli(copy, "longest-message", str(run))
    assert made.returncode == 0, made.stderr[-2000:]
    assert "12 trajectories" in made.stdout
    manifest = json.loads((run / "manifest.json").read_text())
    assert manifest["artifacts"]["longest_message_scores.parquet"]["step"] == "longest-message"
    scores = pd.read_parquet(run / "longest_message_scores.parquet")
    messages = pd.read_parquet(run / "messages.parquet")
    assert scores["max_chars"].max() == messages.loc[messages["role"] == "assistant", "content_chars"].max()

    after = cli(copy, "compare-estimators", str(run), "--n-boot", "20", "--embedder", "hash")
    assert after.returncode == 0, after.stderr[-2000:]
    assert "longest_message.max_chars" in after.stdout
    assert "longest_message (" not in after.stderr
    table = pd.read_csv(run / "estimator_table.csv")
    assert table.set_index("estimator").loc["longest_message.max_chars", "family"] == "longest_message"

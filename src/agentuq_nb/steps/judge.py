"""``judge``: an LLM judge (or a panel: several models and prompts) over every trajectory of a results file →
``RUN_DIR/judge_scores.parquet``, read by the ``judge`` estimators (:mod:`agentuq_nb.estimators.judge`).

What a judge reads, how its verdict becomes a probability and how a long conversation is fitted to its context:
:mod:`agentuq_nb.uq.judge`. Each verdict is one job of the common executor (in this process, on threads for a remote
judge, or on Dask with ``--scheduler``), cached in ``checkpoints/judge/<key>.json`` as soon as it arrives (an atomic
write): the key is the trajectory's content, the model, the prompt's text and the settings, so a rerun - after a
kill, or with a judge added - asks only what is not cached, and a trajectory whose content changed is judged anew.
The table is published as one commit; verdicts of an earlier run of this command that this one does not ask again
(other judges, other trajectories) are kept in it: a panel grows one judge at a time. A run folder not extracted yet is extracted first.
"""
from __future__ import annotations

import json
import math
from dataclasses import asdict, dataclass, field
from itertools import islice
from pathlib import Path
from typing import Any, Optional

import pandas as pd
import pyarrow as pa
from pydantic import Field

from agentuq_nb.common.limits import MAX_SMALL_JSON_BYTES
from agentuq_nb.distributed import JobRunner
from agentuq_nb.io.atomic import atomic_write_json
from agentuq_nb.io.errors import InputError, StaleArtifactError
from agentuq_nb.io.files import read_limited_json
from agentuq_nb.io.ingest.results import ResultsFile
from agentuq_nb.io.outputs import check_run_destination
from agentuq_nb.io.store.artifacts import results_input, run_results
from agentuq_nb.io.store.rundir import RunDir
from agentuq_nb.records import Results
from agentuq_nb.records.config import EMBEDDED_MODEL, ExecutionConfig
from agentuq_nb.records.keys import key_dtypes
from agentuq_nb.records.monitor_scores import MONITOR_COLUMNS, monitor_table, replace_monitor
from agentuq_nb.records.tokens import TRAJECTORY_KEYS
from agentuq_nb.steps.base import RESULTS_HELP, Command, FamilyHint, Reporter, Step, StepConfig
from agentuq_nb.steps.extract import ExtractConfig
from agentuq_nb.steps.extract import run as extract_run
from agentuq_nb.steps.scoring_jobs import simulation_count
from agentuq_nb.uq.judge import (
    MAX_ENTRY_CHARS,
    PROMPTS,
    TOP_LOGPROBS,
    JudgeJob,
    JudgePrompt,
    JudgeSettings,
    cache_key,
    content_digest,
    judge_name,
    judge_on_worker,
    judge_one,
    load_prompt,
    transcript_entries,
)

#: what one verdict of the embedded model takes on 2 cores: its prompt decoded at the rate DESIGN.md measured
#: (≈530 tokens in ≈3.3 s) for the outcome prompt's mean of 2,245 tokens on 3 real gpt-4.1 airline trajectories
#: (whole, in its 8,192-token window), plus 48 answer tokens at ~70 tok/s; measured end to end on a machine shared
#: with other work (load average ~21 on 2 cores) it was ~110 s per verdict
EMBEDDED_SECONDS_PER_VERDICT = 2245 * 3.3 / 530 + 48 / 70
#: how a long conversation is fitted to the judge's context (said by the command and recorded in the table)
CONTEXT_RULE = ("a message longer than --max-entry-chars keeps its head and tail; a transcript that does not fit "
                "keeps its opening messages (up to a third of the room) and as many closing messages as fit, one "
                "marker line naming the messages and tokens left out in the middle; the room is the context "
                "(--context-tokens, else the model's window) less the rest of the prompt, max_tokens and 64 tokens")
#: the footer key of the table's settings and context rule
META_KEY = b"agentuq_nb.judge"
#: the judge table's counts (nullable integers)
INTEGER_COLUMNS = ("prompt_tokens", "completion_tokens", "transcript_entries", "elided_entries", "elided_tokens",
                   "context_tokens")
#: the judge table: a monitor table's columns, then the judge's own
TABLE_COLUMNS = [*MONITOR_COLUMNS[:MONITOR_COLUMNS.index("risk")], *MONITOR_COLUMNS[MONITOR_COLUMNS.index("risk") + 1:],
                 "model", "prompt", "prompt_source", "prompt_sha256", "p_pass", "probability_source", "verdict_token", "verdict_mass",
                 *INTEGER_COLUMNS, "content_sha256", "settings_sha256", "cache_key"]


def judge_cost(run: RunDir) -> str | None:
    """What the suggested ``judge`` costs on ``run`` with the embedded model."""
    if not run.has("trajectories"):
        return None
    import pyarrow.parquet as pq

    n = pq.read_metadata(run.file("trajectories")).num_rows
    minutes = max(1, round(n * EMBEDDED_SECONDS_PER_VERDICT / 60))
    return (f"about {minutes} min for its {n} trajectories with the embedded SmolLM2-135M on 2 cores (a weak judge: "
            "--model MODEL asks any litellm model, its cost recorded per trajectory)")


STEP = Step("judge", "agentuq-nb judge RESULTS --out RUN_DIR --model MODEL", ("judge_scores", "checkpoints"),
            adds=(FamilyHint("judge", "an LLM judge's verdict on each trajectory",
                             f"agentuq-nb judge RESULTS --out RUN_DIR --model {EMBEDDED_MODEL} --prompt outcome",
                             cost=judge_cost),))


class JudgeConfig(StepConfig):
    """The results judged, the judges (every model with every prompt), what each answer may take, how jobs run."""

    results: Path = Field(description=RESULTS_HELP)
    models: list[str] = Field(default_factory=lambda: [EMBEDDED_MODEL], min_length=1,
                              description=f"the judge: a litellm model name (repeat for a panel; default: "
                                          f"{EMBEDDED_MODEL})")
    prompts: list[str] = Field(default_factory=lambda: ["outcome"], min_length=1,
                               description=f"a named prompt ({', '.join(PROMPTS)}) or a template file (repeat for a "
                                           "panel; default: outcome)")
    max_tokens: int = Field(48, ge=1, le=4096, description="tokens of each answer (the verdict comes first)")
    top_logprobs: int = Field(TOP_LOGPROBS, ge=0, le=20, description="top-k alternatives asked per answer token (the "
                              "verdict's probability is read from them; 0: the verbalized verdict only)")
    context_tokens: Optional[int] = Field(None, ge=128, description="the judge's context in tokens (default: the "
                                          "model's window as litellm knows it)")
    max_entry_chars: int = Field(MAX_ENTRY_CHARS, ge=100, description="a message longer than this keeps its head and "
                                 "tail")
    limit: Optional[int] = Field(None, ge=1, description="judge only the first N simulations")
    execution: ExecutionConfig = Field(default_factory=ExecutionConfig)


@dataclass
class JudgeReport:
    run_dir: Path
    judges: list[str] = field(default_factory=list)
    trajectories: int = 0
    judged: int = 0  # verdicts asked now
    cached: int = 0  # verdicts found in the cache (a resumed run, or judges asked before)
    logprobs: int = 0  # of the table's verdicts: probability from the verdict token's log-probs
    verbalized: int = 0  # from the answer's text
    unparsed: int = 0  # neither
    elided: int = 0  # verdicts whose transcript was shortened to fit
    prompt_tokens: int = 0
    completion_tokens: int = 0
    cost_usd: float | None = 0.0  # the table's verdicts, this run's judges; None: some model has no price
    cost_now_usd: float | None = 0.0  # the verdicts asked now
    context_rule: str = CONTEXT_RULE

    def as_dict(self) -> dict:
        out = asdict(self)
        out["run_dir"] = str(self.run_dir)
        return out


def finite_or_none(value: Any) -> Any:
    return None if isinstance(value, float) and not math.isfinite(value) else value


def save_verdict(path: Path, key: str, verdict: dict, report: JudgeReport) -> None:
    """Cache one verdict (an atomic write: a kill leaves it whole or absent) and count it."""
    atomic_write_json(path, {**{k: finite_or_none(v) for k, v in verdict.items()}, "cache_key": key})
    report.judged += 1
    cost = verdict.get("cost_usd")
    report.cost_now_usd = None if cost is None or report.cost_now_usd is None else report.cost_now_usd + cost


def read_verdict_file(path: Path, expected: dict) -> dict:
    """A cached verdict, checked: a JSON object made for this trajectory, prompt and model."""
    entry = read_limited_json(path, MAX_SMALL_JSON_BYTES, "cached judge verdict")
    wrong = [k for k, v in expected.items() if not isinstance(entry, dict) or entry.get(k) != v]
    if wrong:
        raise InputError(path, f"is not the cached verdict it is named for ({', '.join(wrong)} differ); delete it and "
                               "run the command again to judge that trajectory anew")
    return entry


def earlier_verdicts(folder: RunDir, asked: pd.DataFrame) -> pd.DataFrame | None:
    """The rows of an up-to-date judge table (made from these results: a stale one is not kept) that were not asked
    again now (``asked``: the keys, monitor and settings of every verdict asked now): other judges, and other
    trajectories of the same judges asked with the same settings (a run with ``--limit``); a judge asked now with
    other settings keeps none of its earlier rows, so that one judge's rows share one setting."""
    if not folder.has("judge_scores"):
        return None
    try:
        table = key_dtypes(folder.read_frame("judge_scores"))
    except StaleArtifactError:
        return None
    now = asked.drop_duplicates("monitor").set_index("monitor")["settings_sha256"]
    theirs = table["settings_sha256"] if "settings_sha256" in table.columns else pd.Series(None, index=table.index)
    other_settings = table["monitor"].map(now).notna() & (table["monitor"].map(now) != theirs)
    marked = table.merge(asked[[*TRAJECTORY_KEYS, "monitor"]].drop_duplicates(), on=[*TRAJECTORY_KEYS, "monitor"],
                         how="left", indicator=True)
    return table[((marked["_merge"] == "left_only").to_numpy()) & ~other_settings.to_numpy()]


def run(run_dir: str | Path | RunDir, config: JudgeConfig) -> JudgeReport:
    """Every trajectory of ``config.results`` (its first ``limit``) judged by every model with every prompt →
    ``RUN_DIR/judge_scores.parquet``, one commit; resumable per verdict (see the module docstring)."""
    from agentuq_nb import llm

    folder = RunDir.of(run_dir)
    check_run_destination(folder.path, config.results, command=STEP.name)  # never inside the results, nor another run
    prompts = [load_prompt(p) for p in config.prompts]  # a bad template is refused before anything runs
    names = [judge_name(p.name, m) for m in config.models for p in prompts]
    if len(set(names)) != len(names):
        raise ValueError(f"a judge is named twice ({', '.join(sorted({n for n in names if names.count(n) > 1}))}): "
                         "give each model and prompt once")
    if config.execution.scheduler is None:  # on a cluster the workers' environment is what counts
        for model in config.models:
            llm.check_model(model)
    judges = [(prompt, JudgeSettings(model, config.max_tokens, config.top_logprobs, config.context_tokens,
                                     config.max_entry_chars)) for model in config.models for prompt in prompts]
    report = JudgeReport(folder.path, judges=names)
    with folder.lock(STEP.name):
        if not folder.has("trajectories"):
            extract_run(folder, ExtractConfig(results=config.results))
        results_path, digest = run_results(folder, config.results)
        file = ResultsFile.open(results_path, tell_version=False)  # its header and its simulations: one sniff
        info = file.header.get("info") or {}
        domain = Results.domain_of(info)
        policy = str((info.get("environment_info") or {}).get("policy") or "")
        cache = folder.folder(f"{folder.relative('checkpoints')}/judge", make=True)
        wanted: list[tuple[dict, str, str, JudgePrompt, JudgeSettings]] = []

        def jobs():
            for sim in islice(file.simulations(), config.limit):
                keys = {"domain": domain, "task_id": str(sim.task_id), "trial": sim.trial, "seed": sim.seed}
                report.trajectories += 1
                sha, entries = content_digest(sim), None
                for prompt, settings in judges:
                    key = cache_key(sha, prompt, settings)
                    wanted.append((keys, sim.id, key, prompt, settings))
                    if (cache / f"{key}.json").exists():
                        report.cached += 1
                        continue
                    entries = entries if entries is not None else transcript_entries(sim, config.max_entry_chars)
                    yield key, JudgeJob(keys=keys, simulation_id=str(sim.id), content_sha256=sha, entries=entries,
                                        prompt=prompt, settings=settings, policy=policy,
                                        where=f"{results_path} simulation {sim.id}")

        runner = JobRunner(label="judge", desc=f"judge ({len(judges)} judge{'s' if len(judges) > 1 else ''})",
                           unit="verdict", noun="verdicts", kept_as=f"cached in {cache}",
                           **config.execution.runner_options())
        runner.run(judge_one, jobs(), lambda key, verdict: save_verdict(cache / f"{key}.json", key, verdict, report),
                   total=simulation_count(results_path, config.limit) * len(judges), done=lambda: report.cached,
                   worker_fn=judge_on_worker)
        table = verdict_table(cache, wanted, report)
        asked = key_dtypes(pd.DataFrame([{**w[0], "monitor": judge_name(w[3].name, w[4].model),
                                          "settings_sha256": w[4].sha256} for w in wanted]))
        earlier = earlier_verdicts(folder, asked)
        table = replace_monitor(earlier if earlier is not None and not earlier.empty else None, table)
        meta = json.dumps({"context_rule": CONTEXT_RULE, "settings": [s.as_key() for _, s in judges],
                           "prompts": {p.name: {"sha256": p.sha256, "source": p.source} for p in prompts}})
        arrow = pa.Table.from_pandas(table, preserve_index=False)
        arrow = arrow.replace_schema_metadata({**(arrow.schema.metadata or {}), META_KEY: meta.encode()})
        with folder.commit(STEP.name) as commit:
            commit.write_parquet("judge_scores", arrow, results_input(folder, results_path, digest))
    return report


def verdict_table(cache: Path, wanted: list, report: JudgeReport) -> pd.DataFrame:
    """One row per trajectory and judge asked now, from the cache, as a monitor table (``score`` = P(fail));
    an unparsed verdict (no probability) is counted in the report and left out. The report's totals are counted."""
    rows = []
    for keys, simulation_id, key, prompt, settings in wanted:
        entry = read_verdict_file(cache / f"{key}.json", {"prompt_sha256": prompt.sha256, "model": settings.model,
                                                          "cache_key": key})
        source = str(entry.get("probability_source"))
        if source not in ("logprobs", "verbalized", "unparsed"):
            raise InputError(cache / f"{key}.json", f"has probability_source {source!r}; delete it and run again")
        setattr(report, source, getattr(report, source) + 1)
        for total in ("prompt_tokens", "completion_tokens"):
            setattr(report, total, getattr(report, total) + int(entry.get(total) or 0))
        cost = entry.get("cost_usd")
        report.cost_usd = None if cost is None or report.cost_usd is None else report.cost_usd + float(cost)
        report.elided += int((entry.get("elided_entries") or 0) > 0)
        if source == "unparsed":
            continue
        rows.append({**keys, "simulation_id": str(simulation_id), "monitor": judge_name(prompt.name, settings.model),
                     "score": float(entry["p_fail"]), "higher_is_uncertain": True, "verdict": entry.get("verdict"),
                     "justification": str(entry.get("answer") or ""), "cost_usd": cost,
                     "source": f"{settings.model} with the prompt {prompt.name} ({prompt.source})",
                     "model": settings.model, "prompt": prompt.name, "prompt_source": prompt.source,
                     "prompt_sha256": prompt.sha256,
                     "p_pass": entry.get("p_pass"), "probability_source": source, "verdict_token": entry.get("verdict_token"),
                     "verdict_mass": entry.get("verdict_mass"), "prompt_tokens": entry.get("prompt_tokens"),
                     "completion_tokens": entry.get("completion_tokens"),
                     "transcript_entries": entry.get("transcript_entries"),
                     "elided_entries": entry.get("elided_entries"), "elided_tokens": entry.get("elided_tokens"),
                     "context_tokens": entry.get("context_tokens"), "content_sha256": entry.get("content_sha256"),
                     "settings_sha256": settings.sha256, "cache_key": key})
    table = pd.DataFrame(rows, columns=TABLE_COLUMNS)
    for column in ("p_pass", "verdict_mass", "cost_usd"):
        table[column] = pd.to_numeric(table[column], errors="coerce").astype(float)
    for column in INTEGER_COLUMNS:
        table[column] = pd.to_numeric(table[column], errors="coerce").astype("Int64")
    return monitor_table(table)


def show(report: JudgeReport, run_dir: Path, config: JudgeConfig, say: Reporter) -> None:
    """What the command prints: the report, and a line on where the verdicts' probabilities came from."""
    say.say(json.dumps(report.as_dict(), indent=2))
    total = report.logprobs + report.verbalized + report.unparsed
    cost = "unknown (litellm has no price for a judge)" if report.cost_usd is None else f"${report.cost_usd:.4f}"
    say.say(f"{total} verdicts ({report.judged} asked now, {report.cached} cached): {report.logprobs} from the verdict "
            f"token's log-probs, {report.verbalized} verbalized, {report.unparsed} unparsed; {report.prompt_tokens} "
            f"prompt + {report.completion_tokens} answer tokens, cost {cost} → {run_dir / 'judge_scores.parquet'}",
            warn=True)
    if report.elided:
        say.say(f"note: {report.elided} transcripts were shortened to fit the judge's context ({CONTEXT_RULE})",
                warn=True)


COMMAND = Command(summary="An LLM judge (or a panel) over every trajectory → RUN_DIR/judge_scores.parquet "
                          "(family judge).", arguments=("results",), out=True,
                  out_help="run directory (extracted from RESULTS first if it is new)",
                  options=("models", "prompts", "max_tokens", "top_logprobs", "context_tokens", "max_entry_chars",
                           "limit", "execution.scheduler", "execution.max_concurrency", "execution.api_bases"),
                  flags={"models": "--model", "prompts": "--prompt", "execution.api_bases": "--api-base"},
                  help={"execution.max_concurrency": "verdicts in flight (remote judges)"},
                  errors=("FanOutFailed", "APIError"), show=show)


def judge(results: str | Path, out: str | Path | RunDir, **options: Any) -> JudgeReport:
    """:func:`run` with the fields of :class:`JudgeConfig` and ``ExecutionConfig`` as keywords."""
    execution_fields = set(ExecutionConfig.model_fields)
    execution = ExecutionConfig(**{k: v for k, v in options.items() if k in execution_fields})
    own = {k: v for k, v in options.items() if k not in execution_fields}
    return run(out, JudgeConfig(results=results, execution=execution, **own))

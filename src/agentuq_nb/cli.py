"""The ``agentuq-nb`` command line: one command per step of a study.

Heavy modules (the LLM, the simulator, papermill) are imported inside the commands that need
them, so ``agentuq-nb --help`` and the analysis commands start fast.
"""
from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Optional

import typer

from agentuq_nb.io.errors import InputError

app = typer.Typer(add_completion=False, no_args_is_help=True, help=__doc__.splitlines()[0])


def _fail(err: Exception) -> None:
    typer.secho(f"error: {err}", fg=typer.colors.RED, err=True)
    raise typer.Exit(code=2)


@app.command()
def extract(
    results: Path = typer.Argument(..., help="τ²-bench results: a v0/v1 JSON file or a v1.0.1 results directory"),
    out: Path = typer.Option(..., "--out", help="run directory to write tokens.parquet and the manifest to"),
    sidecar_dir: Optional[Path] = typer.Option(None, "--sidecar-dir", help="where agentuq sidecar JSONL files are, if not beside the results"),
):
    """Token rows from results + sidecars → RUN_DIR/tokens.parquet."""
    from agentuq_nb.uq.extract import extract as run_extract

    try:
        report = run_extract(results, out, sidecar_dir, progress=True)
    except (InputError, FileNotFoundError) as err:
        _fail(err)
    typer.echo(f"{report.num_simulations} simulations, {report.num_tokens} token rows → {out / 'tokens.parquet'}")
    for kind, info in report.warnings.as_dict().items():
        typer.secho(f"warning: {kind}: {info['count']} (e.g. {info['example']})", fg=typer.colors.YELLOW, err=True)


@app.command()
def aggregate(run_dir: Path = typer.Argument(..., help="run directory with tokens.parquet")):
    """Turn and trajectory summaries → RUN_DIR/{turn,trajectory}_summary.{csv,parquet}."""
    from agentuq_nb.uq.aggregation import aggregate as run_aggregate

    try:
        turns, trajs = run_aggregate(run_dir)
    except (ValueError, FileNotFoundError) as err:
        _fail(err)
    typer.echo(f"{len(turns)} turn rows, {len(trajs)} trajectory rows → {run_dir}")


@app.command()
def evaluate(
    run_dir: Path = typer.Argument(...),
    role: str = typer.Option("assistant", help="role whose uncertainty is evaluated (assistant, user, combined, observation_*, total)"),
    uncertainty: str = typer.Option("avg_token_nll", help="trajectory-summary column used as the uncertainty score"),
    failure_threshold: float = typer.Option(1.0, help="failure = reward < threshold"),
    invert: bool = typer.Option(False, "--invert", help="the score is a confidence (higher = more likely success)"),
    scorer: Optional[str] = typer.Option(None, help="which scorer's rows (default: self, else the only one)"),
    n_boot: int = typer.Option(1000, help="bootstrap resamples for the 95% CIs"),
    seed: int = typer.Option(0),
):
    """Failure prediction metrics with bootstrap CIs → RUN_DIR/eval_metrics.json, eval_curves.csv."""
    from agentuq_nb.pipeline.evaluate_run import evaluate as run_evaluate

    try:
        result = run_evaluate(run_dir, role, uncertainty, failure_threshold, invert, scorer, n_boot, seed)
    except (ValueError, FileNotFoundError) as err:
        _fail(err)
    typer.echo(json.dumps({"n": result["n"], "n_failures": result["n_failures"], "metrics": result["metrics"]}, indent=2))


@app.command()
def reproduce(params: list[Path] = typer.Argument(..., help="params YAML file(s), e.g. params/quickstart.yaml")):
    """Run every notebook of a study through papermill; figures → figures/<params-name>/."""
    from agentuq_nb.pipeline.reproduce import run_study

    for path in params:
        try:
            run_dir = run_study(path)
        except (InputError, FileNotFoundError) as err:
            _fail(err)
        typer.echo(f"done: {run_dir}")


@app.command("serve-local")
def serve_local(
    port: int = typer.Option(8000, help="port on 127.0.0.1"),
    host: str = typer.Option("127.0.0.1", help="bind address (keep loopback unless you mean it)"),
):
    """Serve the embedded model as an OpenAI-compatible API (chat + completions with logprobs)."""
    from agentuq_nb.llm.server import serve_local as run_server

    typer.echo(f"serving local/smollm2-135m-instruct on http://{host}:{port}/v1 (Ctrl-C to stop)")
    run_server(host=host, port=port)


def main() -> None:  # pragma: no cover - console entry
    app()


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())

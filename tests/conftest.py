"""Shared fixtures: where the real τ²-bench files are, and small synthetic runs."""
from __future__ import annotations

from pathlib import Path

import pytest

import agentuq_nb  # noqa: F401  -- sets the offline defaults before any test module imports litellm

ROOT = Path(__file__).resolve().parents[1]
TAU2_DIR = ROOT.parent / "shared" / "data" / "tau2"
TAU2_FILES = sorted(TAU2_DIR.glob("*.json")) if TAU2_DIR.is_dir() else []


def require_tau2() -> list[Path]:
    if not TAU2_FILES:
        pytest.skip(f"real τ²-bench files not found in {TAU2_DIR} (they live in ../shared/data/tau2 beside the checkout)")
    return TAU2_FILES


@pytest.fixture
def tau2_files() -> list[Path]:
    return require_tau2()


@pytest.fixture
def synthetic_results(tmp_path) -> Path:
    from agentuq_nb.io.synthetic import write_synthetic_results

    return write_synthetic_results(tmp_path / "src", num_simulations=12, messages_per_simulation=14, tokens_per_message=7)


def make_aggregated_run(tmp: Path, **synthetic) -> Path:
    """Synthetic results → extract → aggregate in ``tmp/run`` (shared by the estimator tests)."""
    from agentuq_nb.io.synthetic import write_synthetic_results
    from agentuq_nb.uq.aggregation import aggregate
    from agentuq_nb.uq.extraction import extract

    results = write_synthetic_results(tmp / "src", **synthetic)
    extract(results, tmp / "run")
    aggregate(tmp / "run")
    return tmp / "run"

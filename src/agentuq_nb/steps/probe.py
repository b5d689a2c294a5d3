"""``probe``: structural and conceptual uncertainty of one prompt (:func:`agentuq_nb.uq.structural.probe`), with
per-token sparklines; no run folder."""
from __future__ import annotations

from pathlib import Path
from typing import Optional

from pydantic import Field

from agentuq_nb.common.limits import MAX_SAMPLES
from agentuq_nb.steps.base import Command, Reporter, SeedField, Step, StepConfig
from agentuq_nb.uq.structural import ProbeResult, probe

STEP = Step("probe", "agentuq-nb probe PROMPT", run_folder=False)


class ProbeConfig(StepConfig):
    """The prompt, how many responses are sampled and how."""

    prompt: str = Field(min_length=1, description="the prompt to probe")
    n: int = Field(5, ge=2, le=MAX_SAMPLES, description="sampled responses")
    model: Optional[str] = Field(None, description="litellm model name (default: the embedded model)")
    max_tokens: int = Field(48, ge=1, description="tokens per response")
    temperature: float = Field(1.0, gt=0.0, description="sampling temperature")
    seed: SeedField = Field(description="seed of the first response (the i-th: seed + i)")
    plot: Optional[Path] = Field(None, description="also save the sparklines figure here (.png/.pdf)")
    force: bool = Field(False, description="replace an existing --plot file that probe did not make")


def run(config: ProbeConfig) -> ProbeResult:
    """Sample and measure; with ``config.plot`` the sparklines figure is saved there (the path checked first: see
    :func:`agentuq_nb.figures.style.save_as`)."""
    if config.plot is not None:
        from agentuq_nb.figures.style import check_figure_path

        check_figure_path(config.plot, STEP.name, "--plot", config.force)
    result = probe(**config.model_dump(exclude={"plot", "force"}))
    if config.plot is not None:
        import matplotlib.pyplot as plt

        from agentuq_nb.figures.structural import probe_sparklines_figure
        from agentuq_nb.figures.style import save_as

        fig = probe_sparklines_figure(result)
        try:
            save_as(fig, config.plot, STEP.name, "--plot", config.force)
        finally:
            plt.close(fig)
    return result


def show(result: ProbeResult, run_dir: None, config: ProbeConfig, say: Reporter) -> None:
    """What the command prints: the probe's summary, where the figure is."""
    say.say(result.summary())
    if config.plot is not None:
        say.say(f"figure → {config.plot}")


COMMAND = Command(summary="Structural and conceptual uncertainty of one prompt, with per-token sparklines.",
                  arguments=("prompt",), options=("n", "model", "max_tokens", "temperature", "seed", "plot", "force"),
                  show=show)

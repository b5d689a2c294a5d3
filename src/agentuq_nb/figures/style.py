"""One visual style for every figure, and one way to save them (PNG + PDF)."""
from __future__ import annotations

from pathlib import Path

import matplotlib
import matplotlib.pyplot as plt
from matplotlib.backend_bases import FigureCanvasBase

from agentuq_nb.io.atomic import atomic_write_with
from agentuq_nb.io.errors import InputError
from agentuq_nb.io.outputs import check_output_file

# Okabe–Ito: distinguishable with colour-vision deficiency and in greyscale print.
PALETTE = {
    "success": "#0072B2",
    "failure": "#D55E00",
    "neutral": "#555555",
    "accent": "#009E73",
    "secondary": "#CC79A7",
    "highlight": "#E69F00",
}
SERIES = ["#0072B2", "#D55E00", "#009E73", "#CC79A7", "#E69F00", "#56B4E9", "#F0E442", "#000000"]

RC = {
    "figure.dpi": 110,
    "savefig.dpi": 200,
    "figure.figsize": (5.0, 3.6),
    "font.size": 10,
    "axes.titlesize": 11,
    "axes.labelsize": 10,
    "axes.spines.top": False,
    "axes.spines.right": False,
    "axes.grid": True,
    "grid.alpha": 0.25,
    "legend.frameon": False,
    "axes.prop_cycle": matplotlib.cycler(color=SERIES),
    "pdf.fonttype": 42,  # editable text in the PDF
    "svg.hashsalt": "agentuq_nb",
}


def use_style() -> None:
    plt.rcParams.update(RC)


def save(fig, name: str, figures_dir: str | Path) -> list[Path]:
    """Write ``figures_dir/name.png`` and ``.pdf`` atomically; returns both paths."""
    figures_dir = Path(figures_dir)
    figures_dir.mkdir(parents=True, exist_ok=True)
    paths = []
    for ext in ("png", "pdf"):
        path = figures_dir / f"{name}.{ext}"
        metadata = reproducible_metadata(ext)
        atomic_write_with(path, lambda p, ext=ext, md=metadata: fig.savefig(p, format=ext, bbox_inches="tight", metadata=md))
        paths.append(path)
    return paths


#: the metadata matplotlib would stamp into a file that changes from one save to the next (the time, by format), or
#: with its version (PNG's software key): left out, the same figure saved twice has the same bytes
#: (benchmarks/outputs_unchanged.py compares a study's figures byte for byte). SVG's element ids are fixed by the
#: style's ``svg.hashsalt``; PostScript has no such switch (matplotlib stamps the time unless SOURCE_DATE_EPOCH is set).
VOLATILE_METADATA = {"png": {"Software": None}, "pdf": {"CreationDate": None}, "svg": {"Date": None},
                     "svgz": {"Date": None}}


def reproducible_metadata(fmt: str, **metadata: str) -> dict | None:
    """The ``metadata`` argument of ``savefig`` for ``fmt``: ``metadata`` without the keys that change between saves."""
    merged = {**VOLATILE_METADATA.get(fmt, {}), **metadata}
    return merged or None


#: the metadata key that carries a figure's mark, by format (formats without one cannot be recognised later:
#: an existing file of theirs is replaced only with ``force``)
MARK_KEYS = {"png": "Software", "pdf": "Creator", "svg": "Creator", "ps": "Creator", "eps": "Creator"}


def save_as(fig, path: str | Path, command: str, option: str, force: bool = False) -> Path:
    """Write ``fig`` to a path the user named (``probe --plot``), in the format its suffix says, marked as made by
    ``command``: the rule of :mod:`agentuq_nb.io.outputs` (an existing file is replaced only when ``command`` made
    it, or with ``force``)."""
    mark = f"agentuq_nb {command}"
    path = check_figure_path(path, command, option, force)
    fmt = path.suffix.lstrip(".").lower() or "png"
    metadata = reproducible_metadata(fmt, **({MARK_KEYS[fmt]: mark} if fmt in MARK_KEYS else {}))
    atomic_write_with(path, lambda p: fig.savefig(p, format=fmt, bbox_inches="tight", metadata=metadata))
    return path


def check_figure_path(path: str | Path, command: str, option: str, force: bool = False) -> Path:
    """``path`` when :func:`save_as` may write a figure there (a format matplotlib writes, the output rule), else
    an InputError naming it and ``option``."""
    path = Path(path)
    fmt = path.suffix.lstrip(".").lower() or "png"
    supported = FigureCanvasBase.get_supported_filetypes()
    if fmt not in supported:
        raise InputError(path, f"{option}: '.{fmt}' is not a figure format matplotlib writes (one of "
                               f"{', '.join('.' + f for f in sorted(supported))})")
    return check_output_file(path, command=command, option=option, what="figure",
                             made_before=f"agentuq_nb {command}".encode(), force=force, example="figure.png")


def legend_below(fig, handles=None, labels=None, ax=None, ncol: int = 1, fontsize: float = 7, **kwargs):
    """The figure's legend under its axes, off the data. ``fig`` must be made with ``layout="constrained"``, which
    makes room for it; ``handles``/``labels`` default to those of ``ax`` (or of every axes of ``fig``)."""
    if handles is None:
        axes = [ax] if ax is not None else fig.axes
        pairs = [hl for a in axes for hl in zip(*a.get_legend_handles_labels())]
        labels_seen: dict[str, object] = {}
        for h, lab in pairs:
            labels_seen.setdefault(lab, h)
        handles, labels = list(labels_seen.values()), list(labels_seen)
    if not handles:
        return None
    return fig.legend(handles, labels if labels is not None else [h.get_label() for h in handles],
                      loc="outside lower center", ncol=ncol, fontsize=fontsize, **kwargs)


def counted(n: int, noun: str, plural: str | None = None) -> str:
    """``"1 trajectory"``, ``"96 trajectories"``: a count with what it counts."""
    return f"{n} {noun if n == 1 else (plural or noun + 's')}"

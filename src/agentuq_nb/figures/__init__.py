"""Figures: one function per figure, one visual style, ``save`` writes PNG + PDF."""
from agentuq_nb.figures.failure_prediction import (
    accuracy_rejection_figure,
    roc_figure,
    uncertainty_distribution_figure,
)
from agentuq_nb.figures.style import PALETTE, save, use_style
from agentuq_nb.figures.token_view import TokenView, token_view

__all__ = [
    "PALETTE", "TokenView", "accuracy_rejection_figure", "roc_figure", "save",
    "token_view", "uncertainty_distribution_figure", "use_style",
]

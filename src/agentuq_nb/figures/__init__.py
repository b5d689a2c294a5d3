"""Figures: one function per figure, one visual style, ``save`` writes PNG + PDF.

The names below are imported when first used (:func:`agentuq_nb.common.lazy.lazy_exports`): importing a figure
module that draws nothing (such as :mod:`.detector_card` for a command) does not import matplotlib.
"""
from agentuq_nb.common.lazy import lazy_exports

__getattr__, __dir__, __all__ = lazy_exports(__name__, {
    "failure_prediction": ["accuracy_rejection_figure", "roc_figure", "uncertainty_distribution_figure"],
    "style": ["PALETTE", "save", "use_style"],
    "token_view": ["TokenView", "token_view"],
})

"""The ``external`` family: per-trajectory scores from outside the toolkit, imported into a run.

The import-scores step (:mod:`agentuq_nb.steps.import_scores`) reads a score file a user brings (CSV or JSONL keyed
by simulation id, or by task id and trial; a vendor's trust score, a monitor of their own) or a τ²-bench judge
summary as published (its verdicts) and commits them to ``external_scores.parquet``; each imported name is the
estimator ``external.<name>`` (:class:`~agentuq_nb.estimators.monitor.MonitorFamily`), ranked by its risk (a
higher-is-safer score negated) beside the families computed from the run itself and the length baselines.
"""
from __future__ import annotations

from agentuq_nb.estimators.base import Family, declare_family, register
from agentuq_nb.estimators.monitor import MonitorFamily

#: scores imported from outside (published judge verdicts, third-party trust scores)
EXTERNAL = declare_family(Family("external", rank=78, label="external monitors", color="#AA4499", forest_order=5))


@register
class ExternalMonitors(MonitorFamily):
    """Every imported score of a run (``external.<name>``)."""

    family = "external"
    what = "an imported per-trajectory score"

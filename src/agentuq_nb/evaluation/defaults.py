"""The statistics' defaults that configs name (``n_boot``, the calibration methods), in a module that imports
nothing heavy: a step's config, and so the command line's options, can take them without loading scipy."""
from __future__ import annotations

#: bootstrap resamples of every CI and paired test, unless a caller asks for other
DEFAULT_N_BOOT = 1000
#: the false discovery rate of the Benjamini-Hochberg step over an estimator table's tests against the best length
#: baseline (the tests of one run on its page, of the pooled leaderboard in compare-runs)
DEFAULT_FDR_Q = 0.1
#: the calibration maps: Platt scaling and isotonic regression
METHODS = ("platt", "isotonic")
#: the protocols that judge a learned failure detector (:mod:`.detector_protocols` says what each holds out)
DETECTOR_PROTOCOLS = {
    "within_run": "within-run cross-fitting by task (trained on the same run's other tasks)",
    "leave_one_run_out": "leave one run out (trained on the other runs, which may hold the same tasks)",
    "leave_run_and_task_out": "leave one run and its tasks out (run- and task-disjoint, same domain in training)",
    "leave_one_domain_out": "leave one domain out (trained on the other domains)",
}
#: a learned detector's text vocabulary (:class:`.detector_model.DetectorSettings`): the most frequent terms kept, the
#: training trajectories and the tasks a term must appear in (a term of one task - its user's name - names the task)
DETECTOR_MAX_TERMS = 5000
DETECTOR_MIN_DF = 2
DETECTOR_MIN_TASKS = 3

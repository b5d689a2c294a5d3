"""The statistics' defaults that configs name (``n_boot``, the calibration methods), in a module that imports
nothing heavy: a step's config, and so the command line's options, can take them without loading scipy."""
from __future__ import annotations

#: bootstrap resamples of every CI and paired test, unless a caller asks for other
DEFAULT_N_BOOT = 1000
#: the calibration maps: Platt scaling and isotonic regression
METHODS = ("platt", "isotonic")

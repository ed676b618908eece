"""The old home of :mod:`raynb.train.experiment_callback` (renamed in 0.2): kept one release so
that an experiment pickled before (a notebook's ``Callback`` subclass names its base class by
this path) still restores. New code imports ``raynb.train.experiment_callback`` or
``raynb.tune.Callback``."""

import sys

from . import experiment_callback

sys.modules[__name__] = experiment_callback

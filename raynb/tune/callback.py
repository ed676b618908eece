"""``raynb.tune.Callback`` (Ray's ``ray.tune.callback.Callback``): hooks called in the
notebook process as an experiment runs, given in ``RunConfig(callbacks=[...])``.

The classes are defined in ``raynb.train.experiment_callback`` (``TorchTrainer`` calls them too, and
``train`` cannot import ``tune``); this module is their name in Ray Tune's layout.
"""

from ..train.callback_list import CallbackList
from ..train.experiment_callback import Callback, CallbackError, TrialSnapshot

__all__ = ["Callback", "CallbackError", "CallbackList", "TrialSnapshot"]

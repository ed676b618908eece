"""The check of a ``pl.Trainer``'s arguments inside a raynb function (see
``raynb.train.lightning_guard``, installed by ``raynb.train.torch`` too)."""

from ..lightning_guard import FIX, check_trainer_args  # noqa: F401 - re-exported
from ..lightning_guard import install as install_trainer_check  # noqa: F401 - re-exported

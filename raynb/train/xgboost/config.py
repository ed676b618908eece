"""``ray.train.xgboost.XGBoostConfig`` on raynb: ``XGBoostTrainer(xgboost_config=...)``.

Ray's sets up xgboost's collective (a tracker on the driver, its address in each rank's
environment) and wraps the training function in ``xgboost.collective.CommunicatorContext``.
raynb's ``XGBoostTrainer`` does the same on its warm ranks (``collective.communicator``), so
the config's one field is checked, and only ``"rabit"`` (xgboost's collective, as Ray's) is
taken.
"""

from __future__ import annotations

from dataclasses import dataclass

from ..backend_config import BackendConfig


@dataclass
class XGBoostConfig(BackendConfig):
    """xgboost's collective settings (Ray's ``XGBoostConfig``).

    Args:
        xgboost_communicator (str): ``"rabit"``, the only one Ray and raynb serve.

    Raises:
        ValueError: another communicator.
    """

    xgboost_communicator: str = "rabit"

    def __post_init__(self):
        if self.xgboost_communicator != "rabit":
            raise ValueError(
                f"XGBoostConfig(xgboost_communicator={self.xgboost_communicator!r}): only 'rabit' "
                "(xgboost's collective) is served, as in Ray 2.60"
            )

    @property
    def framework(self) -> str:
        return "xgboost"

    def to_dict(self) -> dict:
        return {"xgboost_communicator": self.xgboost_communicator}


def check_xgboost_config(config) -> None:
    """``XGBoostTrainer(xgboost_config=...)``: None or an XGBoostConfig.

    Raises:
        TypeError: anything else."""
    if config is not None and not isinstance(config, XGBoostConfig):
        raise TypeError(
            "XGBoostTrainer(xgboost_config=...) takes a raynb.train.xgboost.XGBoostConfig, "
            f"got {type(config).__name__}"
        )

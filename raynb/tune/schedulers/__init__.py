"""Trial schedulers (Ray Tune names): FIFO, ASHA, HyperBand, median stopping, PBT,
and ResourceChangingScheduler (resources fixed on raynb)."""

from .async_hyperband import ASHAScheduler, AsyncHyperBandScheduler
from .fifo import FIFOScheduler
from .hyperband import HyperBandScheduler
from .median_stopping_rule import MedianStoppingRule
from .pbt import PopulationBasedTraining
from .resource_changing_scheduler import ResourceChangingScheduler
from .trial_scheduler import CONTINUE, STOP, Exploit, TrialScheduler

__all__ = [
    "TrialScheduler",
    "CONTINUE",
    "STOP",
    "Exploit",
    "FIFOScheduler",
    "ASHAScheduler",
    "AsyncHyperBandScheduler",
    "HyperBandScheduler",
    "MedianStoppingRule",
    "PopulationBasedTraining",
    "ResourceChangingScheduler",
]

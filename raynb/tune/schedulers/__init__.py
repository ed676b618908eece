"""Trial schedulers (Ray Tune names): FIFO, ASHA, HyperBand, median stopping, PBT,
and ResourceChangingScheduler (resources fixed on raynb)."""

from .async_hyperband import ASHAScheduler, AsyncHyperBandScheduler
from .fifo import FIFOScheduler
from .hb_bohb import HyperBandForBOHB
from .hyperband import HyperBandScheduler
from .median_stopping_rule import MedianStoppingRule
from .pb2 import PB2
from .pbt import PopulationBasedTraining
from .pbt_replay import PopulationBasedTrainingReplay
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
    "HyperBandForBOHB",
    "MedianStoppingRule",
    "PopulationBasedTraining",
    "PB2",
    "PopulationBasedTrainingReplay",
    "ResourceChangingScheduler",
]

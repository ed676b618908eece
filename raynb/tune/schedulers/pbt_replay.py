"""Ray Tune's ``PopulationBasedTrainingReplay``: not served.

Ray's replays the ``pbt_policy_*.txt`` log that its PBT writes (each trial's config
changes over time). raynb's PBT writes no such log, so there is nothing to replay; the
class is here under Ray's name to say so when it is made.
"""

from __future__ import annotations

from .trial_scheduler import TrialScheduler


class PopulationBasedTrainingReplay(TrialScheduler):
    """Raises NotImplementedError: raynb's PBT writes no policy log to replay.

    Raises:
        NotImplementedError: always, naming the way out.
    """

    def __init__(self, policy_file: str):
        raise NotImplementedError(
            f"PopulationBasedTrainingReplay({policy_file!r}): raynb's PopulationBasedTraining "
            "writes no pbt_policy_*.txt log to replay; rerun the schedule of config changes "
            "yourself (read each trial's config over time from its result history)"
        )

"""Report every boosting round and checkpoint the booster
(``ray.train.lightgbm.RayTrainReportCallback``)."""
from __future__ import annotations

import os
import tempfile

from .. import session as _session
from ..checkpoint import Checkpoint

CHECKPOINT_NAME = "model.txt"


def flatten_results(evaluation_result_list, metrics=None) -> dict:
    """LightGBM's ``[(data_name, eval_name, value, higher_better[, stdv]), ...]`` ->
    ``{"valid-binary_logloss": value}``; ``metrics`` as for :class:`RayTrainReportCallback`."""
    flat = {}
    for entry in evaluation_result_list:
        data_name, eval_name, value = entry[:3]
        if len(entry) > 4:  # lightgbm.cv: a mean and its standard deviation
            flat[f"{data_name}-{eval_name}-mean"] = float(value)
            flat[f"{data_name}-{eval_name}-stdv"] = float(entry[4])
        else:
            flat[f"{data_name}-{eval_name}"] = float(value)
    if metrics is None:
        return flat
    if isinstance(metrics, str):
        metrics = [metrics]
    pairs = metrics.items() if isinstance(metrics, dict) else ((m, m) for m in metrics)
    return {name: flat[key] for name, key in pairs if key in flat}


class RayTrainReportCallback:
    """A LightGBM callback (``lightgbm.train(callbacks=[...])``) that ``report()``s each
    round's eval results and checkpoints the booster (Ray Train's callback of the same name).

    Every rank reports (a checkpoint commits once all ranks reached it); rank 0 writes
    the model file, ``model.txt``.

    Args:
        metrics (str | list[str] | dict | None): which ``"<data name>-<metric>"`` keys to
            report (``"valid-binary_logloss"``); a dict renames them; None reports all.
        filename (str): the model file in the checkpoint.
        frequency (int): checkpoint every this many rounds (0: never during training).
        checkpoint_at_end (bool): checkpoint after the last round.

    Each report also carries ``epoch``: the 0-based boosting round, counted from the
    first round of a resumed booster's (``init_model=``), which drives the pane.
    """

    CHECKPOINT_NAME = CHECKPOINT_NAME
    order = 30  # after lightgbm's own recording / early-stopping callbacks

    def __init__(self, metrics=None, filename: str = CHECKPOINT_NAME, frequency: int = 0,
                 checkpoint_at_end: bool = True):
        if not isinstance(frequency, int) or frequency < 0:
            raise ValueError(f"RayTrainReportCallback(frequency={frequency!r}): give an integer >= 0")
        self._metrics, self._filename = metrics, filename
        self._frequency, self._checkpoint_at_end = frequency, checkpoint_at_end

    @classmethod
    def get_model(cls, checkpoint: Checkpoint, filename: str = CHECKPOINT_NAME):
        """The ``lightgbm.Booster`` in ``checkpoint``.

        Raises:
            FileNotFoundError: it holds no such file (names what it holds).
        """
        import lightgbm

        path = os.path.join(checkpoint.path, filename)
        if not os.path.isfile(path):
            raise FileNotFoundError(f"checkpoint {checkpoint.path} has no {filename}; it holds "
                                    f"{sorted(os.listdir(checkpoint.path))}")
        return lightgbm.Booster(model_file=path)

    def __call__(self, env) -> None:
        metrics = flatten_results(env.evaluation_result_list or [], self._metrics)
        metrics["epoch"] = env.iteration
        last = env.iteration == env.end_iteration - 1
        save = (last and self._checkpoint_at_end) or \
            (self._frequency and (env.iteration + 1) % self._frequency == 0)
        if not save:
            _session.report(metrics)
            return
        with tempfile.TemporaryDirectory(prefix="lightgbm-ckpt-") as tmp:
            if _session.get_context().get_world_rank() == 0:
                env.model.save_model(os.path.join(tmp, self._filename))
            _session.report(metrics, checkpoint=Checkpoint.from_directory(tmp))

"""Report every boosting round and checkpoint the booster (``ray.train.xgboost.RayTrainReportCallback``)."""

from __future__ import annotations

import os
import tempfile

from .. import session as _session
from ..checkpoint import Checkpoint

try:
    from xgboost.callback import TrainingCallback
except ImportError:  # xgboost not installed: the class is defined, using it says so

    class TrainingCallback:  # type: ignore[no-redef]
        def __init__(self):
            raise ImportError(
                "raynb.train.xgboost needs xgboost: pip install 'raynb[xgboost]' (or xgboost-cpu)"
            )


CHECKPOINT_NAME = "model.ubj"


def flatten_evals(evals_log: dict, metrics=None) -> dict:
    """``{"valid": {"logloss": [.., x]}}`` -> ``{"valid-logloss": x}`` (the last round's).

    ``metrics``: None keeps all; a list keeps those names; a dict renames
    ``{reported name: "valid-logloss"}`` (Ray's ``RayTrainReportCallback(metrics=...)``).
    """
    flat = {}
    for data_name, by_metric in evals_log.items():
        for metric, values in by_metric.items():
            v = values[-1]
            flat[f"{data_name}-{metric}"] = float(v[0] if isinstance(v, tuple) else v)
    if metrics is None:
        return flat
    if isinstance(metrics, str):
        metrics = [metrics]
    pairs = metrics.items() if isinstance(metrics, dict) else ((m, m) for m in metrics)
    return {name: flat[key] for name, key in pairs if key in flat}


class RayTrainReportCallback(TrainingCallback):
    """An ``xgboost.callback.TrainingCallback`` that ``report()``s each round's eval metrics
    and saves the booster as a checkpoint (Ray Train's callback of the same name).

    Use it in ``xgboost.train(..., callbacks=[RayTrainReportCallback(...)])`` inside an
    ``XGBoostTrainer``'s ``train_loop_per_worker`` (the default loop uses it too). Every
    rank reports (so a checkpoint commits once all ranks reached it); rank 0 writes the
    model file.

    Args:
        metrics (str | list[str] | dict | None): which ``"<eval name>-<metric>"`` keys to
            report (``"valid-logloss"``); a dict renames them; None reports all.
        filename (str): the model file in the checkpoint; ``.ubj`` (binary) or ``.json``.
        frequency (int): checkpoint every this many rounds (0: never during training).
        checkpoint_at_end (bool): checkpoint after the last round (unless that round's
            was already saved).

    Each report also carries ``epoch`` (the 0-based boosting round, counted across
    restarts), which drives the progress pane.
    """

    CHECKPOINT_NAME = CHECKPOINT_NAME  # Ray's: the model file in each checkpoint

    def __init__(
        self,
        metrics=None,
        filename: str = CHECKPOINT_NAME,
        frequency: int = 0,
        checkpoint_at_end: bool = True,
        _num_boost_round: int | None = None,
    ):
        super().__init__()
        # The run's total rounds, when known (XGBoostTrainer's loop): the last round's report
        # then carries the final checkpoint itself, so a scheduler that stops the trial at
        # that report (ASHA's max_t) still finds it.
        self._num_boost_round = _num_boost_round
        if not isinstance(frequency, int) or isinstance(frequency, bool) or frequency < 0:
            raise ValueError(
                f"RayTrainReportCallback(frequency={frequency!r}): give an integer >= 0 "
                "(rounds between checkpoints; 0 saves none during training)"
            )
        if not filename.endswith((".ubj", ".json")):
            raise ValueError(
                f"RayTrainReportCallback(filename={filename!r}): use a name ending in "
                ".ubj or .json (xgboost picks the format from it)"
            )
        self._metrics = metrics
        self._filename = filename
        self._frequency = frequency
        self._checkpoint_at_end = checkpoint_at_end
        self._last = None  # (epoch, metrics) of the last report
        self._saved_epoch = None  # the round of the last checkpoint

    def _report(self, model, epoch: int, metrics: dict, checkpoint: bool) -> None:
        row = dict(metrics, epoch=epoch)
        if not checkpoint:
            _session.report(row)
            return
        if _session.get_context().get_world_rank() != 0:
            _session.report(row)  # every rank reports; rank 0's file is the checkpoint
        else:
            with tempfile.TemporaryDirectory(prefix="xgb_ckpt_") as d:
                model.save_model(os.path.join(d, self._filename))
                _session.report(row, checkpoint=Checkpoint.from_directory(d))
        self._saved_epoch = epoch

    def after_iteration(self, model, epoch: int, evals_log: dict) -> bool:
        # xgboost counts ``epoch`` from 0 in each xgboost.train call, also when it continues
        # an xgb_model: the booster's own count is the round across restarts.
        epoch = model.num_boosted_rounds() - 1
        metrics = flatten_evals(evals_log, self._metrics)
        self._flush_held(model)
        self._last = (epoch, metrics)
        due = self._frequency > 0 and (epoch + 1) % self._frequency == 0
        due = due or (self._checkpoint_at_end and self._num_boost_round == epoch + 1)
        if due or not self._checkpoint_at_end or self._num_boost_round is not None:
            self._report(model, epoch, metrics, checkpoint=due)
        else:
            # Which round is the last is known only in after_training: this round's report
            # waits for the next round (or the end, which adds the final checkpoint to it),
            # so there is one report per round, training_iteration = rounds, as in Ray Tune.
            self._held = True
        return False

    _held = False

    def _flush_held(self, model, checkpoint: bool = False) -> None:
        if self._held:
            self._held = False
            self._report(model, *self._last, checkpoint=checkpoint)

    def after_training(self, model):
        if self._held:
            self._flush_held(model, checkpoint=True)
        elif self._checkpoint_at_end and self._last is not None and self._saved_epoch != self._last[0]:
            epoch, metrics = self._last
            self._report(model, epoch, metrics, checkpoint=True)
        return model

    @classmethod
    def get_model(cls, checkpoint: Checkpoint, filename: str = CHECKPOINT_NAME):
        """The ``xgboost.Booster`` saved in ``checkpoint`` (``<checkpoint>/<filename>``).

        Raises:
            FileNotFoundError: the checkpoint holds no such file (names the files it has).
        """
        import xgboost

        if not isinstance(checkpoint, Checkpoint):
            raise TypeError(
                f"get_model() takes a raynb.train.Checkpoint (Result.checkpoint), got "
                f"{checkpoint!r}: a run has none when it saved none (checkpoint_frequency=0 "
                "and checkpoint_at_end=False) or stopped before its first"
            )
        path = os.path.join(checkpoint.path, filename)
        if not os.path.isfile(path):
            have = sorted(os.listdir(checkpoint.path)) if os.path.isdir(checkpoint.path) else []
            raise FileNotFoundError(
                f"{checkpoint!r} holds no {filename} (it has {have or 'nothing'}); "
                "was it saved by RayTrainReportCallback / XGBoostTrainer?"
            )
        booster = xgboost.Booster()
        booster.load_model(path)
        return booster

"""``LightGBMTrainer``: one LightGBM model trained over the ranks of a run (``ray.train.lightgbm``)."""

from __future__ import annotations

from typing import Callable

from ...cluster.worker.task_context import takes_config
from .. import session as _session
from ..checkpoint import Checkpoint
from ..config import RunConfig, ScalingConfig
from ..torch import TorchTrainer
from .callback import RayTrainReportCallback
from .config import check_lightgbm_config
from .network import free_network, network_params


class _InNetwork:
    """A ``train_loop_per_worker`` run with LightGBM's network parameters set up (what
    the ranks call); LightGBM's sockets are closed after it, on a warm worker."""

    def __init__(self, fn: Callable):
        self.fn = fn
        self.__name__ = getattr(fn, "__name__", "train_loop_per_worker")

    def __call__(self, config):
        with network_params():
            try:
                return self.fn(config) if takes_config(self.fn) else self.fn()
            finally:
                free_network()


def _default_loop(config: dict):
    """The loop of ``LightGBMTrainer(params=..., label_column=..., num_boost_round=...)`` on
    every rank: data-parallel over the ranks, resuming from the latest checkpoint."""
    import lightgbm
    import torch

    from .data import build_datasets
    from .network import get_network_params

    params = dict(config["params"])
    params.setdefault("num_threads", torch.get_num_threads())  # raynb's share of the node's cores
    params.setdefault("verbose", -1)
    if _session.get_context().get_world_size() > 1:
        params.setdefault("tree_learner", "data")
        params.setdefault("pre_partition", True)  # each rank holds only its own rows
        params.update(get_network_params())
    train, sets, names = build_datasets(config["dataset_names"], config["label_column"])
    total, booster, done = config["num_boost_round"], None, 0
    ckpt = _session.get_checkpoint()
    if ckpt is not None:
        booster = RayTrainReportCallback.get_model(ckpt)
        done = booster.current_iteration()
    if done >= total:
        return None
    callback = RayTrainReportCallback(
        frequency=config["checkpoint_frequency"], checkpoint_at_end=config["checkpoint_at_end"]
    )
    kwargs = dict(config.get("train_kwargs") or {})
    callbacks = [callback] + list(kwargs.pop("callbacks", None) or [])
    lightgbm.train(
        params,
        train,
        num_boost_round=total - done,
        valid_sets=sets,
        valid_names=names,
        init_model=booster,
        callbacks=callbacks,
        **kwargs,
    )
    return None


class LightGBMTrainer(TorchTrainer):
    """Distributed data-parallel LightGBM on the warm pool (``ray.train.lightgbm.LightGBMTrainer``).

    Two forms, as ``XGBoostTrainer``'s:

    - ``LightGBMTrainer(params={...}, label_column="y", num_boost_round=100,
      datasets={"train": df_or_ds, "valid": ...})``: every rank builds its
      ``lightgbm.Dataset`` from its own rows of each dataset (every row on one rank),
      trains with ``tree_learner="data"`` over LightGBM's socket network, reports every
      dataset's metrics each round as ``"<name>-<metric>"`` (``"valid-binary_logloss"``),
      and checkpoints the model (``model.txt``) every ``checkpoint_frequency`` rounds and
      at the end;
    - ``LightGBMTrainer(train_loop_per_worker, train_loop_config=..., datasets=...)``: your
      function on every rank; merge :func:`get_network_params` into ``lightgbm.train``'s
      params, read data with ``shard_frame(name)``, report with ``RayTrainReportCallback``.

    Args:
        train_loop_per_worker: ``f()`` or ``f(config)``, or None for the default loop.
        train_loop_config (dict | None): ``f``'s config.
        params (dict | None): LightGBM's parameters (default loop); ``num_threads``
            defaults to the rank's share of its node's cores.
        label_column (str | None): the label's column (default loop).
        num_boost_round (int): boosting rounds in all, >= 1 (default loop).
        datasets (dict | None): ``{"train": ..., "valid": ...}``, raynb Datasets or pandas
            DataFrames; "train" is required for the default loop.
        checkpoint_frequency (int), checkpoint_at_end (bool): when the default loop saves.
        resume_from_checkpoint (Checkpoint | None): a checkpoint with ``model.txt``: the
            default loop boosts on from its rounds up to ``num_boost_round``.
        **train_kwargs: more arguments of ``lightgbm.train`` (default loop).
        scaling_config, run_config: as for ``TorchTrainer``.

    Raises:
        ValueError: ``num_boost_round < 1``; no "train" dataset; a missing label column.
        TypeError: ``params`` not a dict; both or neither of a loop and ``params``.
        ImportError: lightgbm is not installed (``pip install "raynb[lightgbm]"``).
    """

    _name_prefix = "LightGBMTrainer"

    def __init__(
        self,
        train_loop_per_worker: Callable | None = None,
        *,
        train_loop_config: dict | None = None,
        params: dict | None = None,
        label_column: str | None = None,
        num_boost_round: int = 10,
        datasets: dict | None = None,
        checkpoint_frequency: int = 0,
        checkpoint_at_end: bool = True,
        scaling_config: ScalingConfig | None = None,
        run_config: RunConfig | None = None,
        resume_from_checkpoint: Checkpoint | None = None,
        **train_kwargs,
    ):
        from ._compat import import_lightgbm

        import_lightgbm()  # ImportError naming the extra, before anything ships
        check_lightgbm_config(train_kwargs.pop("lightgbm_config", None))  # Ray's; raynb sets up the network
        inner = getattr(train_loop_per_worker, "__wrapped__", train_loop_per_worker)  # WithDatasets
        if isinstance(inner, _InNetwork):  # restore(): the saved function
            super().__init__(
                train_loop_per_worker,
                train_loop_config=train_loop_config,
                scaling_config=scaling_config,
                run_config=run_config,
                resume_from_checkpoint=resume_from_checkpoint,
                datasets=_as_datasets(datasets),
            )
            cfg = (
                train_loop_config if inner.fn is _default_loop and isinstance(train_loop_config, dict) else {}
            )
            self.params, self.label_column = cfg.get("params"), cfg.get("label_column")
            self.num_boost_round = self._total_epochs = cfg.get("num_boost_round")
            return
        if train_loop_per_worker is not None:
            if params is not None or label_column is not None or train_kwargs:
                raise TypeError(
                    "LightGBMTrainer takes either train_loop_per_worker, or params= and "
                    "label_column= (the built-in loop), not both"
                )
            fn, config = _InNetwork(train_loop_per_worker), train_loop_config
        else:
            config = _default_config(
                params, label_column, num_boost_round, datasets, checkpoint_frequency, checkpoint_at_end
            )
            config["train_kwargs"] = train_kwargs
            fn = _InNetwork(_default_loop)
            self._total_epochs = num_boost_round
        self.params, self.label_column, self.num_boost_round = params, label_column, num_boost_round
        super().__init__(
            fn,
            train_loop_config=config,
            scaling_config=scaling_config,
            run_config=run_config,
            resume_from_checkpoint=resume_from_checkpoint,
            datasets=_as_datasets(datasets),
        )

    def _tune_parts(self, param_space: dict | None):
        """(fn, ScalingConfig, base config, nested key, RunConfig, name) for ``Tuner``:
        ``param_space={"params": {...}}`` (and ``num_boost_round``) merges into the default
        loop's config; a ``train_loop_per_worker`` takes ``{"train_loop_config": {...}}``."""
        default = self.params is not None
        allowed = {"params", "num_boost_round"} if default else {"train_loop_config"}
        extra = sorted(set(param_space or {}) - allowed)
        if extra:
            raise ValueError(
                f"param_space for this LightGBMTrainer takes only {sorted(allowed)}; got also {extra}"
            )
        from ..datasets import with_datasets

        fn = with_datasets(self.train_loop_per_worker, self.datasets)  # one copy per node, all trials
        return (
            fn,
            self.scaling_config,
            self.train_loop_config,
            "" if default else "train_loop_config",
            self.run_config,
            "LightGBMTrainer",
        )

    @staticmethod
    def get_model(checkpoint: Checkpoint, filename: str = RayTrainReportCallback.CHECKPOINT_NAME):
        """The ``lightgbm.Booster`` in ``checkpoint`` (``Result.checkpoint``)."""
        return RayTrainReportCallback.get_model(checkpoint, filename)


def _as_datasets(datasets):
    """DataFrames become raynb Datasets (one shared-memory copy per node)."""
    import pandas as pd

    from ...data import from_pandas

    if not datasets:
        return None
    if not isinstance(datasets, dict):
        raise TypeError(
            f"datasets must be a dict of name -> DataFrame or raynb.data.Dataset, got "
            f"{type(datasets).__name__}"
        )
    return {k: from_pandas(v) if isinstance(v, pd.DataFrame) else v for k, v in datasets.items()}


def _default_config(
    params, label_column, num_boost_round, datasets, checkpoint_frequency, checkpoint_at_end
) -> dict:
    import pandas as pd

    from .data import check_frame

    if not isinstance(params, dict):
        raise TypeError(
            f"LightGBMTrainer(params=...) takes a dict of lightgbm parameters, got "
            f"{type(params).__name__}; or pass train_loop_per_worker"
        )
    if not isinstance(num_boost_round, int) or isinstance(num_boost_round, bool) or num_boost_round < 1:
        raise ValueError(f"LightGBMTrainer(num_boost_round={num_boost_round!r}): give an integer >= 1")
    if not isinstance(checkpoint_frequency, int) or checkpoint_frequency < 0:
        raise ValueError(
            f"LightGBMTrainer(checkpoint_frequency={checkpoint_frequency!r}): give an "
            "integer >= 0 (rounds between checkpoints; 0 saves only at the end)"
        )
    if not isinstance(label_column, str):
        raise TypeError(
            f"LightGBMTrainer(label_column=...) takes the label's column name, got {label_column!r}"
        )
    if not isinstance(datasets, dict) or "train" not in datasets:
        have = sorted(datasets) if isinstance(datasets, dict) else type(datasets).__name__
        raise ValueError(
            f"LightGBMTrainer needs datasets={{'train': ...}} (and optionally 'valid' etc. "
            f"for valid_sets); got {have}"
        )
    for name, ds in datasets.items():
        if isinstance(ds, pd.DataFrame):
            check_frame(ds, label_column, name)
    return {
        "params": dict(params),
        "label_column": label_column,
        "num_boost_round": num_boost_round,
        "dataset_names": list(datasets),
        "checkpoint_frequency": checkpoint_frequency,
        "checkpoint_at_end": bool(checkpoint_at_end),
    }

"""``XGBoostTrainer``: one xgboost model trained over the ranks of a run (``ray.train.xgboost``)."""

from __future__ import annotations

from typing import Callable

from ...cluster.worker.task_context import takes_config
from .. import session as _session
from ..checkpoint import Checkpoint
from ..config import RunConfig, ScalingConfig
from ..torch import TorchTrainer
from .callback import CHECKPOINT_NAME, RayTrainReportCallback
from .collective import communicator
from .config import check_xgboost_config
from .dmatrix import check_columns, check_frame


class _InCollective:
    """A ``train_loop_per_worker`` run inside xgboost's collective (what the ranks call)."""

    def __init__(self, fn: Callable, timeout_s: float | None):
        self.fn, self.timeout_s = fn, timeout_s
        self.__name__ = getattr(fn, "__name__", "train_loop_per_worker")

    def __call__(self, config):
        with communicator(self.timeout_s):
            return self.fn(config) if takes_config(self.fn) else self.fn()


def _default_loop(config: dict):
    """The training loop of ``XGBoostTrainer(params=..., label_column=..., num_boost_round=...)``,
    on every rank, inside the collective: resume from the latest checkpoint when there is one."""
    import torch
    import xgboost

    from .dmatrix import build_matrices

    params = dict(config["params"])
    params.setdefault("nthread", torch.get_num_threads())  # raynb's share of the node's cores
    total = config["num_boost_round"]
    evals = build_matrices(config["dataset_names"], config["label_column"], params)
    booster, done = None, 0
    ckpt = _session.get_checkpoint()
    if ckpt is not None:
        booster = RayTrainReportCallback.get_model(ckpt)
        done = booster.num_boosted_rounds()
    callback = RayTrainReportCallback(
        frequency=config["checkpoint_frequency"],
        checkpoint_at_end=config["checkpoint_at_end"],
        _num_boost_round=total,
    )
    rank = _session.get_context().get_world_rank()
    if done >= total:  # the last attempt died after its final checkpoint
        if rank == 0:
            print(f"xgboost: the checkpoint already has {done} of {total} rounds; nothing to train")
        return None
    if done and rank == 0:
        print(f"xgboost: resuming from round {done} of {total} ({ckpt.path})")
    kwargs = dict(config.get("train_kwargs") or {})
    callbacks = [callback] + list(kwargs.pop("callbacks", None) or [])
    kwargs.setdefault("verbose_eval", False)
    xgboost.train(
        params,
        evals[0][0],
        num_boost_round=total - done,
        evals=evals,
        xgb_model=booster,
        callbacks=callbacks,
        **kwargs,
    )
    return None


def _dataset_columns(ds):
    """(column names, dtypes or None) of a raynb / pandas dataset, or None when unknown."""
    import pandas as pd

    if isinstance(ds, pd.DataFrame):
        return list(ds.columns), list(ds.dtypes)
    schema = getattr(ds, "schema", None)
    schema = schema() if callable(schema) else schema
    names = getattr(schema, "names", None)
    if names is None:
        return None
    types = getattr(schema, "types", None)
    return list(names), (list(types) if types is not None else None)


class XGBoostTrainer(TorchTrainer):
    """Distributed data-parallel XGBoost on the warm pool (``ray.train.xgboost.XGBoostTrainer``).

    Two forms, as in Ray Train:

    - ``XGBoostTrainer(params={...}, label_column="y", num_boost_round=100,
      datasets={"train": df_or_ds, "valid": ...})``: every rank builds its matrices from
      its shard of each dataset, all datasets are ``evals`` (reported each round as
      ``"<name>-<metric>"``, e.g. ``"valid-logloss"``), and the model is checkpointed
      every ``checkpoint_frequency`` rounds and at the end;
    - ``XGBoostTrainer(train_loop_per_worker, train_loop_config=..., datasets=...)``: your
      function, run on every rank inside ``xgboost.collective`` (so ``xgboost.train`` in it
      trains one model over all ranks); read a dataset with ``shard_frame(name)``, report
      with :class:`RayTrainReportCallback`.

    The tracker is started by rank 0 on its node's IP (see ``collective``). With
    ``FailureConfig(max_failures=k)``, a run whose rank died restarts from its latest
    checkpoint and boosts only the rounds left (``xgb_model=`` continuation).

    Args:
        train_loop_per_worker: ``f()`` or ``f(config)``, or None for the default loop.
        train_loop_config (dict | None): ``f``'s config.
        params (dict | None): xgboost's parameters (default loop); ``nthread`` defaults to
            the rank's share of its node's cores.
        label_column (str | None): the label's column (default loop).
        num_boost_round (int): boosting rounds in all, >= 1 (default loop; Ray's default 10).
        datasets (dict | None): ``{"train": ..., "valid": ...}``: raynb Datasets or pandas
            DataFrames (made ``raynb.data.from_pandas`` datasets: one shared-memory copy per
            node). Each rank reads a contiguous share, every row on exactly one rank.
            "train" is required for the default loop.
        resume_from_checkpoint (Checkpoint | None): a checkpoint of this trainer's (its
            ``model.ubj``): the default loop boosts on from its rounds up to ``num_boost_round``.
        checkpoint_frequency (int): checkpoint every this many rounds, 0 for none during
            training (default loop).
        checkpoint_at_end (bool): checkpoint after the last round (default loop).
        **train_kwargs: more arguments of ``xgboost.train`` (default loop): ``callbacks``
            (run after the reporting one), ``obj``, ``custom_metric``, ...
        scaling_config, run_config: as for ``TorchTrainer``.

    Raises:
        ValueError: ``num_boost_round < 1``; no "train" dataset; ``label_column`` missing
            from a dataset (the message lists its columns); a feature column that is not
            numeric (named with its dtype). A parameter xgboost rejects fails the run with
            xgboost's own message, from the rank it happened on.
        TypeError: ``params`` is not a dict; both or neither of a loop and ``params`` forms.
    """

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
        check_xgboost_config(train_kwargs.pop("xgboost_config", None))  # Ray's; raynb sets up the collective
        timeout_s = scaling_config.timeout_s if isinstance(scaling_config, ScalingConfig) else None
        self.datasets = datasets
        inner = getattr(train_loop_per_worker, "__wrapped__", train_loop_per_worker)  # WithDatasets
        if isinstance(inner, _InCollective):  # restore(): the saved function
            super().__init__(
                train_loop_per_worker,
                train_loop_config=train_loop_config,
                scaling_config=scaling_config,
                run_config=run_config,
                resume_from_checkpoint=resume_from_checkpoint,
            )
            default = inner.fn is _default_loop and isinstance(train_loop_config, dict)
            cfg = train_loop_config if default else {}
            self.params, self.label_column = cfg.get("params"), cfg.get("label_column")
            self.num_boost_round = self._total_epochs = cfg.get("num_boost_round")
            self._name_prefix = "XGBoostTrainer"
            return
        if train_loop_per_worker is not None:
            if params is not None or label_column is not None or train_kwargs:
                raise TypeError(
                    "XGBoostTrainer takes either train_loop_per_worker, or params= and "
                    "label_column= (the built-in loop), not both"
                )
            fn, config = _InCollective(train_loop_per_worker, timeout_s), train_loop_config
            self.params = self.label_column = self.num_boost_round = None
        else:
            config = self._default_config(
                params, label_column, num_boost_round, datasets, checkpoint_frequency, checkpoint_at_end
            )
            config["train_kwargs"] = self._train_kwargs(train_kwargs)
            fn = _InCollective(_default_loop, timeout_s)
            self.params, self.label_column, self.num_boost_round = params, label_column, num_boost_round
        super().__init__(
            fn,
            train_loop_config=config,
            scaling_config=scaling_config,
            run_config=run_config,
            resume_from_checkpoint=resume_from_checkpoint,
            **self._datasets_kwarg(datasets),
        )
        self._name_prefix = "XGBoostTrainer"
        self._total_epochs = num_boost_round if train_loop_per_worker is None else None

    @staticmethod
    def _train_kwargs(kwargs: dict) -> dict:
        """Extra ``xgboost.train`` arguments (Ray's ``**train_kwargs``): callbacks, obj,
        custom_metric, early_stopping_rounds, verbose_eval."""
        fixed = sorted(set(kwargs) & {"params", "dtrain", "num_boost_round", "evals", "xgb_model"})
        if fixed:
            raise TypeError(
                f"XGBoostTrainer sets {fixed} of xgboost.train itself; pass params=, "
                "num_boost_round=, datasets= (evals) or resume_from_checkpoint= instead"
            )
        return kwargs

    @staticmethod
    def _datasets_kwarg(datasets) -> dict:
        """``datasets=`` for TorchTrainer: DataFrames become raynb Datasets (``from_pandas``:
        one shared-memory copy per node, not one per rank)."""
        import pandas as pd

        from ...data import from_pandas

        if not datasets:
            return {}
        if not isinstance(datasets, dict):
            raise TypeError(
                f"datasets must be a dict of name -> DataFrame or raynb.data.Dataset, got "
                f"{type(datasets).__name__}"
            )
        return {
            "datasets": {k: from_pandas(v) if isinstance(v, pd.DataFrame) else v for k, v in datasets.items()}
        }

    @staticmethod
    def _default_config(
        params, label_column, num_boost_round, datasets, checkpoint_frequency, checkpoint_at_end
    ) -> dict:
        import pandas as pd

        if params is None or not isinstance(params, dict):
            raise TypeError(
                f"XGBoostTrainer(params=...) takes a dict of xgboost parameters, got "
                f"{type(params).__name__}; or pass train_loop_per_worker"
            )
        if not isinstance(num_boost_round, int) or isinstance(num_boost_round, bool) or num_boost_round < 1:
            raise ValueError(f"XGBoostTrainer(num_boost_round={num_boost_round!r}): give an integer >= 1")
        if (
            not isinstance(checkpoint_frequency, int)
            or isinstance(checkpoint_frequency, bool)
            or checkpoint_frequency < 0
        ):
            raise ValueError(
                f"XGBoostTrainer(checkpoint_frequency={checkpoint_frequency!r}): give an "
                "integer >= 0 (rounds between checkpoints; 0 saves only at the end)"
            )
        if not isinstance(label_column, str):
            raise TypeError(
                f"XGBoostTrainer(label_column=...) takes the label's column name, got {label_column!r}"
            )
        if not isinstance(datasets, dict) or "train" not in datasets:
            have = sorted(datasets) if isinstance(datasets, dict) else None
            raise ValueError(
                f"XGBoostTrainer needs datasets={{'train': ...}} (and optionally 'valid' "
                f"etc. for evals); got {have if have is not None else type(datasets).__name__}"
            )
        for name, ds in datasets.items():
            if isinstance(ds, pd.DataFrame):
                check_frame(ds, label_column, name)
            elif (cols := _dataset_columns(ds)) is not None:
                check_columns(cols[0], cols[1], label_column, name)
        return {
            "params": dict(params),
            "label_column": label_column,
            "num_boost_round": num_boost_round,
            "dataset_names": list(datasets),
            "checkpoint_frequency": checkpoint_frequency,
            "checkpoint_at_end": bool(checkpoint_at_end),
        }

    def _tune_parts(self, param_space: dict | None):
        """(fn, ScalingConfig, base config, nested key, RunConfig, name) for ``Tuner``:
        ``param_space={"params": {...}}`` (and ``num_boost_round``) merges into the default
        loop's config; a ``train_loop_per_worker`` takes ``{"train_loop_config": {...}}``."""
        allowed = {"train_loop_config"} if self.params is None else {"params", "num_boost_round"}
        extra = sorted(set(param_space or {}) - allowed)
        if extra:
            raise ValueError(
                f"param_space for this XGBoostTrainer takes only {sorted(allowed)}; got also {extra}"
            )
        from ..datasets import with_datasets

        nested = "train_loop_config" if self.params is None else ""
        fn = with_datasets(self.train_loop_per_worker, self.datasets)  # one copy per node, all trials
        return (fn, self.scaling_config, self.train_loop_config, nested, self.run_config, "XGBoostTrainer")

    @staticmethod
    def get_model(checkpoint: Checkpoint, filename: str = CHECKPOINT_NAME):
        """The ``xgboost.Booster`` in ``checkpoint`` (``Result.checkpoint``).

        Raises:
            FileNotFoundError: it holds no model file (names what it holds).
        """
        return RayTrainReportCallback.get_model(checkpoint, filename)

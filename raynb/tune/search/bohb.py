"""BOHB's model-based sampling with hpbandster and ConfigSpace (Ray Tune's ``TuneBOHB``):
Falkner et al. 2018, "BOHB: Robust and Efficient Hyperparameter Optimization at Scale".

The space becomes a ``ConfigSpace.ConfigurationSpace``; configs come from hpbandster's
``BOHB`` config generator, which is told every reported result at its budget (the
``hyperband_info["budget"]`` a BOHB scheduler writes, else the result's
``training_iteration``), so the kernel-density model learns from partial runs as well.
"""

from __future__ import annotations

from types import SimpleNamespace

from .library_searcher import LibrarySearcher, import_library, unsupported
from .sample import Categorical, Domain, Float, Integer


def _cs():
    return import_library("ConfigSpace", "TuneBOHB", "ConfigSpace hpbandster")


def _bohb_class():
    import_library("hpbandster", "TuneBOHB", "hpbandster (its build needs setuptools<81)")
    from hpbandster.optimizers.config_generators.bohb import BOHB

    return BOHB


def to_config_space(leaves: dict, seed: int | None = None):
    """Flat ``{key: Domain}`` -> ``ConfigSpace.ConfigurationSpace`` (quantization dropped,
    as in Ray).

    Raises:
        ValueError: randn, grid_search, sample_from, a choice holding domains (naming the key).
    """
    cs = _cs()
    space = cs.ConfigurationSpace(seed=seed)
    for key, leaf in leaves.items():
        if isinstance(leaf, Float):
            hp = cs.UniformFloatHyperparameter(key, lower=leaf.lower, upper=leaf.upper, log=leaf.log)
        elif isinstance(leaf, Integer):
            hp = cs.UniformIntegerHyperparameter(key, lower=leaf.lower, upper=leaf.upper - 1, log=leaf.log)
        elif isinstance(leaf, Categorical) and not any(isinstance(c, Domain) for c in leaf.categories):
            hp = cs.CategoricalHyperparameter(key, choices=list(leaf.categories))
        else:
            raise unsupported("TuneBOHB", key, leaf)
        space.add(hp)
    return space


class TuneBOHB(LibrarySearcher):
    """Suggest configs with BOHB's model (use it with ``HyperBandForBOHB``).

    Args:
        space (dict | ConfigSpace.ConfigurationSpace | None): a tune space (uniform,
            loguniform, randint, lograndint, choice; quantization is dropped) or a
            ConfigurationSpace; None takes the Tuner's ``param_space``.
        bohb_config (dict | None): arguments of hpbandster's ``BOHB`` config generator
            (``min_points_in_model``, ``top_n_percent``, ``num_samples``, ...).
        max_concurrent (int): suggestions live at once (0: no limit).
        metric (str | None), mode ("min" | "max" | None): the objective.
        points_to_evaluate (list[dict] | None): configs to try first.
        seed (int | None): seeds the ConfigurationSpace's sampling.

    Raises:
        ImportError: ConfigSpace or hpbandster is missing. ValueError: an unsupported domain.
    """

    def __init__(
        self,
        space=None,
        bohb_config: dict | None = None,
        max_concurrent: int = 0,
        metric: str | None = None,
        mode: str | None = None,
        points_to_evaluate: list[dict] | None = None,
        seed: int | None = None,
    ):
        cs = _cs()
        _bohb_class()
        self._native = isinstance(space, cs.ConfigurationSpace)
        self._config_space = space if self._native else None
        self._seed, self._bohb_config, self._max_concurrent = seed, dict(bohb_config or {}), max_concurrent
        super().__init__({} if self._native else space, metric, mode, points_to_evaluate)
        self.bohber = None
        self._configs: dict[str, dict] = {}
        self._told: dict[str, float] = {}

    def set_max_concurrency(self, max_concurrent: int) -> bool:
        self._max_concurrent = max_concurrent
        return True

    def _build(self, leaves: dict) -> None:
        if self._config_space is None:
            self._config_space = to_config_space(leaves, self._seed)
        elif self._seed is not None:
            self._config_space.seed(self._seed)
        self.bohber = _bohb_class()(self._config_space, **self._bohb_config)

    def suggest(self, trial_id: str):
        if self._max_concurrent > 0 and len(self._live) >= self._max_concurrent:
            return None
        config = super().suggest(trial_id)
        if isinstance(config, dict):
            self._configs[trial_id] = self._live[trial_id]
        return config

    def _ask(self):
        config, _info = self.bohber.get_config(None)
        config = {k: (v.item() if hasattr(v, "item") else v) for k, v in dict(config).items()}
        return dict(config), config

    def _point(self, flat: dict):
        return dict(flat)

    def _budget(self, result: dict):
        info = result.get("hyperband_info") or {}
        return info.get("budget", result.get(self.time_attr))

    #: The result key read as a trial's budget when no BOHB scheduler wrote one.
    time_attr = "training_iteration"

    def _new_result(self, config: dict, budget, loss: float | None) -> None:
        job = SimpleNamespace(
            result=None if loss is None else {"loss": loss},
            kwargs={"budget": float(budget), "config": config},
            timestamps={},
            exception=None,
        )
        self.bohber.new_result(job)

    def on_trial_result(self, trial_id: str, result: dict) -> None:
        config, budget, loss = self._configs.get(trial_id), self._budget(result), self.loss(result)
        if config is not None and budget is not None and loss is not None:
            self._new_result(config, budget, loss)
            self._told[trial_id] = budget

    def _tell(self, config: dict, loss: float | None) -> None:
        pass  # results were told as they came (on_trial_result), each at its budget

    def on_trial_complete(self, trial_id: str, result: dict | None = None, error: bool = False) -> None:
        config = self._configs.pop(trial_id, None)
        budget = self._budget(result or {})
        if (
            config is not None
            and not error
            and budget is not None
            and self._told.pop(trial_id, None) != budget
        ):
            loss = self.loss(result)
            if loss is not None:
                self._new_result(config, budget, loss)
        super().on_trial_complete(trial_id, result, error)

    def on_pause(self, trial_id: str) -> None:
        """Ray's hook for a paused trial (HyperBandForBOHB); the count of live ones ignores it."""

    def on_unpause(self, trial_id: str) -> None:
        """Ray's hook for a resumed trial."""

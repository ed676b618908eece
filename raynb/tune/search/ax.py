"""Bayesian optimization with Ax (Ray Tune's ``AxSearch``): Meta's adaptive experimentation
platform over BoTorch, driven through its ``AxClient`` service API (Sobol points first, then
a GP model); each trial is ``get_next_trial()`` and ``complete_trial`` /
``log_trial_failure`` when it ends, given points are ``attach_trial``'d.
"""

from __future__ import annotations

import math

from .library_searcher import LibrarySearcher, import_library, unsupported
from .sample import Categorical, Domain, Float, Integer


def _ax_client_module():
    return import_library("ax.service.ax_client", "AxSearch", "ax-platform")


def to_ax_parameters(leaves: dict) -> list[dict]:
    """Flat ``{key: Domain}`` -> Ax's parameter dicts (range / choice).

    Raises:
        ValueError: a quantized range, randn, grid_search, sample_from, a choice holding
            domains (naming the key).
    """
    params = []
    for key, leaf in leaves.items():
        if isinstance(leaf, Float) and leaf.q is None:
            params.append(
                {
                    "name": key,
                    "type": "range",
                    "bounds": [leaf.lower, leaf.upper],
                    "value_type": "float",
                    "log_scale": leaf.log,
                }
            )
        elif isinstance(leaf, Integer) and leaf.q is None:
            bounds = [leaf.lower, leaf.upper - 1]
            params.append(
                {"name": key, "type": "range", "bounds": bounds, "value_type": "int", "log_scale": leaf.log}
            )
        elif isinstance(leaf, Categorical) and not any(isinstance(c, Domain) for c in leaf.categories):
            params.append({"name": key, "type": "choice", "values": list(leaf.categories)})
        else:
            raise unsupported("AxSearch", key, leaf)
    return params


class AxSearch(LibrarySearcher):
    """Suggest configs with Ax.

    Args:
        space (dict | list[dict] | None): a tune space (uniform, loguniform, randint,
            lograndint, choice) or Ax's list of parameter dicts; None takes the Tuner's
            ``param_space``.
        metric (str | None), mode ("min" | "max" | None): the objective.
        points_to_evaluate (list[dict] | None): configs to try first (attached trials).
        parameter_constraints (list[str] | None), outcome_constraints (list[str] | None):
            Ax's constraint strings, e.g. ``"x + y <= 2.0"``.
        ax_client (AxClient | None): a client whose experiment is already created (then
            leave ``space`` out).
        ax_kwargs: more ``AxClient`` arguments (``random_seed``, ...).

    Raises:
        ImportError: ax-platform is not installed. ValueError: an unsupported domain.
    """

    def __init__(
        self,
        space=None,
        metric: str | None = None,
        mode: str | None = None,
        points_to_evaluate: list[dict] | None = None,
        parameter_constraints: list | None = None,
        outcome_constraints: list | None = None,
        ax_client=None,
        **ax_kwargs,
    ):
        _ax_client_module()
        self._ax_params = space if isinstance(space, list) else None
        super().__init__(
            {} if self._ax_params is not None or ax_client is not None else space,
            metric,
            mode,
            points_to_evaluate,
        )
        self._parameter_constraints = parameter_constraints
        self._outcome_constraints = outcome_constraints
        self._ax_kwargs = {"verbose_logging": False, **ax_kwargs}
        self._ax = ax_client

    def _build(self, leaves: dict) -> None:
        if self._ax is not None:
            return
        mod = _ax_client_module()
        self._ax = mod.AxClient(**self._ax_kwargs)
        self._ax.create_experiment(
            parameters=self._ax_params if self._ax_params is not None else to_ax_parameters(leaves),
            objectives={self._metric: mod.ObjectiveProperties(minimize=self._mode == "min")},
            parameter_constraints=self._parameter_constraints,
            outcome_constraints=self._outcome_constraints,
        )

    def _ask(self):
        from ax.exceptions.core import DataRequiredError
        from ax.exceptions.generation_strategy import MaxParallelismReachedException

        try:
            params, index = self._ax.get_next_trial()
        except (MaxParallelismReachedException, DataRequiredError):
            return None  # Ax wants results before its next point: ask again after a trial ends
        return index, dict(params)

    def _point(self, flat: dict):
        _params, index = self._ax.attach_trial(dict(flat))
        return index

    def _tell(self, index, loss: float | None) -> None:
        if loss is None or math.isnan(loss):
            self._ax.log_trial_failure(index)
            return
        value = loss if self._mode == "min" else -loss  # Ax takes the metric as reported
        self._ax.complete_trial(index, raw_data={self._metric: (value, None)})

    @property
    def ax_client(self):
        """The ``AxClient`` (created at the first suggestion)."""
        return self._ax

"""Derivative-free optimization with Nevergrad (Ray Tune's ``NevergradSearch``).

The space becomes an ``ng.p.Dict`` of parameters and each trial is one
``optimizer.ask()`` / ``optimizer.tell(candidate, loss)`` (Nevergrad's ask-and-tell
interface); given points and replayed trials are told as candidates spawned from the
parametrization with their values.
"""

from __future__ import annotations

from .library_searcher import LibrarySearcher, import_library, unsupported
from .sample import Categorical, Domain, Float, Integer


def _ng():
    return import_library("nevergrad", "NevergradSearch", "nevergrad")


def to_nevergrad_space(leaves: dict):
    """Flat ``{key: Domain}`` -> ``ng.p.Dict`` (keys as given, "/" for nesting).

    Raises:
        ValueError: a domain Nevergrad has no parameter for (grid_search, sample_from,
            randn, a choice holding domains), naming the key.
    """
    ng = _ng()
    params = {}
    for key, leaf in leaves.items():
        if isinstance(leaf, Float):
            p = (
                ng.p.Log(lower=leaf.lower, upper=leaf.upper)
                if leaf.log
                else ng.p.Scalar(lower=leaf.lower, upper=leaf.upper)
            )
            params[key] = p if leaf.q is None else p.set_integer_casting() if leaf.q == 1 else p
        elif isinstance(leaf, Integer):
            lo, hi = leaf.low, leaf.high
            p = ng.p.Log(lower=lo, upper=hi) if leaf.log else ng.p.Scalar(lower=lo, upper=hi)
            params[key] = p.set_integer_casting()
        elif isinstance(leaf, Categorical) and not any(isinstance(c, Domain) for c in leaf.categories):
            params[key] = ng.p.Choice(leaf.categories)
        else:
            raise unsupported("NevergradSearch", key, leaf)
    return ng.p.Dict(**params)


def _fit(leaf, value):
    """A Nevergrad value as the domain's kind (quantized floats rounded, ints as int)."""
    if isinstance(leaf, Float) and leaf.q is not None:
        return float(round(value / leaf.q) * leaf.q)
    if isinstance(leaf, Integer):
        v = int(value)
        return v if leaf.q is None else int(round(v / leaf.q) * leaf.q)
    return value.item() if hasattr(value, "item") else value


class NevergradSearch(LibrarySearcher):
    """Suggest configs with a Nevergrad optimizer.

    Args:
        optimizer: an optimizer class (``ng.optimizers.OnePlusOne``), a configured one
            (``ng.families.ParametrizedOnePlusOne(...)``), or an instance built over its
            own parametrization (then leave ``space`` out).
        optimizer_kwargs (dict | None): arguments of a class / configured optimizer
            (``budget``, ``num_workers``, ...).
        space (dict | ng.p.Parameter | None): a tune search space (uniform, loguniform,
            quniform, randint, lograndint, qrandint, choice of plain values) or a
            Nevergrad ``ng.p.Dict`` / ``ng.p.Instrumentation`` of keyword parameters;
            None takes the Tuner's ``param_space``.
        metric (str | None), mode ("min" | "max" | None): the objective.
        points_to_evaluate (list[dict] | None): configs to try first.

    Raises:
        ImportError: nevergrad is not installed. ValueError: an unsupported domain, no
        optimizer, an optimizer instance together with a space.
    """

    def __init__(
        self,
        optimizer=None,
        optimizer_kwargs: dict | None = None,
        space=None,
        metric: str | None = None,
        mode: str | None = None,
        points_to_evaluate: list[dict] | None = None,
    ):
        ng = _ng()
        if optimizer is None:
            raise ValueError("NevergradSearch needs optimizer=, e.g. ng.optimizers.OnePlusOne")
        self._instance = optimizer if isinstance(optimizer, ng.optimization.Optimizer) else None
        if self._instance is not None and (space is not None or optimizer_kwargs):
            raise ValueError(
                "NevergradSearch got an optimizer instance and a space/optimizer_kwargs: pass the "
                "optimizer class (ng.optimizers.OnePlusOne) to let raynb build it over the space"
            )
        self._factory = None if self._instance is not None else optimizer
        self._optimizer_kwargs = dict(optimizer_kwargs or {})
        self._parametrization = None
        if isinstance(space, ng.p.Parameter):
            self._parametrization, space = space, {}
        elif self._instance is not None:
            self._parametrization, space = self._instance.parametrization, {}
        super().__init__(space, metric, mode, points_to_evaluate)
        self._native = self._parametrization is not None
        self._optimizer = self._instance

    def _set_space(self, space) -> None:
        if getattr(self, "_native", False) and space:
            raise ValueError(
                "the search space was given twice: to NevergradSearch (a Nevergrad parametrization) "
                "and to Tuner(param_space=...); give it to one of them"
            )
        super()._set_space(space)

    def _build(self, leaves: dict) -> None:
        if self._parametrization is None:
            self._parametrization = to_nevergrad_space(leaves)
        if self._optimizer is None:
            self._optimizer = self._factory(self._parametrization, **self._optimizer_kwargs)

    def _values(self, candidate) -> dict:
        value = candidate.kwargs if hasattr(candidate, "kwargs") and candidate.args == () else candidate.value
        if self._native:
            return dict(value)
        return {k: _fit(self._leaves[k], v) for k, v in value.items()}

    def _ask(self):
        candidate = self._optimizer.ask()
        return candidate, self._values(candidate)

    def _point(self, flat: dict):
        ng = _ng()
        param = self._optimizer.parametrization
        new_value = ((), dict(flat)) if isinstance(param, ng.p.Instrumentation) else dict(flat)
        return param.spawn_child(new_value=new_value)

    def _tell(self, candidate, loss: float | None) -> None:
        if loss is not None:  # a failed trial is not told: Nevergrad has no "failed" state
            self._optimizer.tell(candidate, loss)

    @property
    def optimizer(self):
        """The Nevergrad optimizer (built at the first suggestion)."""
        return self._optimizer

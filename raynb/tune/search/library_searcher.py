"""What every searcher built over an optimization library shares (HyperOptSearch,
BayesOptSearch, NevergradSearch, ZOOptSearch, TuneBOHB, HEBOSearch, AxSearch).

A subclass translates the search space once (``_build``), asks its library for a point
(``_ask``) and tells it a result (``_tell``). This class does the rest the Ray way:
the space from ``Searcher(space=...)`` or the Tuner's ``param_space``, the constants
kept beside the varying keys, ``points_to_evaluate`` suggested first, the objective
turned into a loss (every library here minimizes but bayes_opt, which the subclass
negates back), ``add_evaluated_point`` for ``Tuner.restore``'s replay, and
``save``/``restore`` (Ray's ``Searcher.save(path)``) by pickling the searcher's state.
"""

from __future__ import annotations

import importlib
import math
import os
from typing import Any

import cloudpickle
import numpy as np

from .sample import Domain, Function, Normal
from .searcher import Searcher
from .variant_generator import flatten, is_grid, path_str, unflatten, validate_space, walk

#: Ray's names for the states of a search space a searcher can be in.
UNRESOLVED_SEARCH_SPACE = str(
    "You passed a `{par}` parameter to {cls} that contained unresolved search "
    "space definitions. {cls} should however be instantiated with fully "
    "configured search spaces only. To use Ray Tune's automatic search space "
    "conversion, pass the space definition as part of the `param_space` argument "
    "to `tune.Tuner()` instead."
)
UNDEFINED_SEARCH_SPACE = str(
    "Trying to sample a configuration from {cls}, but no search "
    "space has been defined. Either pass the `{space}` argument when "
    "instantiating the search algorithm, or pass a `param_space` to "
    "`tune.Tuner()`."
)
UNDEFINED_METRIC_MODE = str(
    "Trying to sample a configuration from {cls}, but the `metric` "
    "({metric}) or `mode` ({mode}) parameters have not been set. "
    "Either pass these arguments when instantiating the search algorithm, "
    "or pass them to `tune.TuneConfig()`."
)


def import_library(module: str, searcher: str, pip_name: str):
    """``importlib.import_module(module)``, or an ImportError naming what to install."""
    try:
        return importlib.import_module(module)
    except ImportError as e:
        raise ImportError(
            f'{searcher} needs the {pip_name} library: pip install "raynb[search]" '
            f"(or pip install {pip_name}); importing {module} failed: {e}"
        ) from None


def domain_name(leaf) -> str:
    """What a search-space leaf is, as an error message names it (``grid_search``, ...)."""
    if is_grid(leaf):
        return "grid_search"
    if isinstance(leaf, Function):
        return "sample_from"
    if isinstance(leaf, Normal):
        return "randn"
    return repr(leaf) if isinstance(leaf, Domain) else type(leaf).__name__


def unsupported(searcher: str, key: str, leaf) -> ValueError:
    """The error for a domain ``searcher`` cannot translate, naming the key and the way out."""
    return ValueError(
        f"{searcher}: key {key!r}: {domain_name(leaf)} is not supported by this searcher; use the "
        "domains its docstring lists, or the default BasicVariantGenerator for grids and sample_from"
    )


class LibrarySearcher(Searcher):
    """Base of the searchers over an optimization library (see the module docstring).

    Subclasses set ``_space_arg`` (the name of their space argument, for messages) and
    implement ``_build(leaves)``, ``_ask() -> (token, flat config)``,
    ``_tell(token, loss | None)`` and ``_point(flat config) -> token | None`` (a given
    point registered as a pending suggestion; None: the library cannot take it, it is
    run and not told).
    """

    _space_arg = "space"

    def __init__(self, space=None, metric=None, mode=None, points_to_evaluate=None):
        super().__init__(metric, mode)
        self._points = [flatten(p) for p in (points_to_evaluate or [])]
        self._space = None
        self._leaves: dict[str, Any] = {}
        self._constants: dict[str, Any] = {}
        self._live: dict[str, Any] = {}
        self._built = False
        if space is not None:
            self._set_space(space)

    # -- the space ---------------------------------------------------------------
    def set_search_properties(self, metric, mode, config, **spec) -> bool:
        if not super().set_search_properties(metric, mode, config):
            return False
        if config and config is not self._space:  # the same space again: a cell re-run
            if self._space is not None:
                raise ValueError(
                    f"the search space was given twice: to {type(self).__name__}"
                    f"({self._space_arg}=...) and to Tuner(param_space=...); give it to one of them"
                )
            self._set_space(config)
        return True

    def _set_space(self, space) -> None:
        if isinstance(space, dict):
            validate_space(space)
            self._leaves = {path_str(p): leaf for p, leaf in walk(space)}
            varying = tuple(self._leaves)
            self._constants = {
                k: v
                for k, v in flatten(space).items()
                if not any(k == d or k.startswith(d + "/") for d in varying)
            }
        self._space = space

    def _ready(self) -> None:
        name = type(self).__name__
        if self._space is None:
            raise ValueError(UNDEFINED_SEARCH_SPACE.format(cls=name, space=self._space_arg))
        if self._metric is None or self._mode is None:
            raise ValueError(UNDEFINED_METRIC_MODE.format(cls=name, metric=self._metric, mode=self._mode))
        if not self._built:
            self._built = True  # before: a _build that registers earlier results calls back here
            try:
                self._build(self._leaves)
            except BaseException:
                self._built = False
                raise

    # -- the loop the driver calls -----------------------------------------------
    def suggest(self, trial_id: str):
        self._ready()
        if self._points:
            flat = self._points.pop(0)
            for key, leaf in self._leaves.items():  # a partial point: the rest sampled
                if key not in flat and isinstance(leaf, Domain) and not isinstance(leaf, Function):
                    flat[key] = leaf.sample(np.random.default_rng())
            self._live[trial_id] = self._point(flat)
            return unflatten({**self._constants, **flat})
        asked = self._ask()
        if asked is None:
            return None
        if asked == Searcher.FINISHED:
            return Searcher.FINISHED
        token, flat = asked
        self._live[trial_id] = token
        return unflatten({**self._constants, **flat})

    def loss(self, result: dict | None) -> float | None:
        """``result[metric]`` as a value to minimize (negated for mode="max"); None when it
        is missing or NaN."""
        value = (result or {}).get(self._metric)
        if not isinstance(value, (int, float)) or isinstance(value, bool) or math.isnan(value):
            return None
        return float(value) if self._mode == "min" else -float(value)

    def on_trial_complete(self, trial_id: str, result: dict | None = None, error: bool = False) -> None:
        if trial_id not in self._live:
            return
        token = self._live.pop(trial_id)
        if token is not None:
            self._tell(token, None if error else self.loss(result))

    def add_evaluated_point(self, config: dict, result: dict | None, error: bool = False) -> None:
        """Tell the library about a trial run elsewhere (``Tuner.restore`` replays the
        finished trials of the experiment into a new searcher)."""
        self._ready()
        flat = {k: v for k, v in flatten(config).items() if k in self._leaves}
        if not self._leaves or set(flat) != set(self._leaves):
            return  # not a point of this space (or a library-native space: no keys to match)
        token = self._point(flat)
        if token is not None:
            self._tell(token, None if error else self.loss(result))

    # -- Ray's save / restore ---------------------------------------------------------
    def get_state(self) -> dict:
        """The searcher's state (library objects included), picklable."""
        return dict(self.__dict__)

    def set_state(self, state: dict) -> None:
        self.__dict__.update(state)

    def save(self, checkpoint_path: str) -> None:
        """Write the state to ``checkpoint_path`` (a file, 0600)."""
        data = cloudpickle.dumps(self.get_state())
        fd = os.open(checkpoint_path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "wb") as f:
            f.write(data)

    def restore(self, checkpoint_path: str) -> None:
        """Read back what :meth:`save` wrote (a file this process's user wrote: trusted)."""
        with open(checkpoint_path, "rb") as f:
            self.set_state(cloudpickle.loads(f.read()))

    def save_to_dir(self, checkpoint_dir: str, session_str: str = "default") -> None:
        self.save(os.path.join(checkpoint_dir, f"searcher-state-{session_str}.pkl"))

    def restore_from_dir(self, checkpoint_dir: str) -> None:
        names = sorted(n for n in os.listdir(checkpoint_dir) if n.startswith("searcher-state-"))
        if not names:
            raise RuntimeError(
                f"{type(self).__name__}.restore_from_dir: no searcher state in {checkpoint_dir}"
            )
        self.restore(os.path.join(checkpoint_dir, names[-1]))

    # -- for subclasses ----------------------------------------------------------
    def _build(self, leaves: dict) -> None:
        raise NotImplementedError

    def _ask(self):
        raise NotImplementedError

    def _tell(self, token, loss: float | None) -> None:
        raise NotImplementedError

    def _point(self, flat: dict):
        return None

"""Walking a search space: validation with key names, grid expansion, sampling, sample_from.

A search space is a nested structure of dicts (and lists) whose leaves are constants,
:class:`~raynb.tune.search.sample.Domain` objects or ``{"grid_search": [...]}``.
Keys are addressed by paths (tuples), and shown as ``a/b/c`` as Ray Tune does.
"""

from __future__ import annotations

import copy
import itertools
from typing import Any, Iterator

import numpy as np

from ...train.experiment_callback import flatten  # noqa: F401  (one implementation; optuna and result_grid import it from here)
from .sample import Domain, Function


def is_grid(value) -> bool:
    return isinstance(value, dict) and len(value) == 1 and "grid_search" in value


def path_str(path: tuple) -> str:
    return "/".join(str(p) for p in path)


def walk(space, path: tuple = ()) -> Iterator[tuple[tuple, Any]]:
    """(path, leaf) for every Domain and grid_search in ``space``, in order."""
    if isinstance(space, Domain) or is_grid(space):
        yield path, space
    elif isinstance(space, dict):
        for k, v in space.items():
            yield from walk(v, path + (k,))
    elif isinstance(space, (list, tuple)):
        for i, v in enumerate(space):
            yield from walk(v, path + (i,))


def validate_space(space, where: str = "param_space") -> None:
    """Raise ValueError naming the key of any Domain with bad bounds or an empty grid.

    Raises:
        ValueError: e.g. ``param_space key 'lr': loguniform(0.1, 0.01): lower must be < upper``.
        TypeError: ``space`` is not a dict.
    """
    if space is None:
        return
    if not isinstance(space, dict):
        raise TypeError(f"{where} must be a dict of hyperparameters, got {type(space).__name__}")
    for path, leaf in walk(space):
        try:
            if is_grid(leaf):
                if not leaf["grid_search"]:
                    raise ValueError("grid_search([]): the list of values is empty")
                for v in leaf["grid_search"]:
                    validate_space(v, where) if isinstance(v, dict) else None
            else:
                leaf.validate()
        except ValueError as e:
            raise ValueError(f"{where} key {path_str(path)!r}: {e}") from None


def get_path(d, path: tuple):
    for p in path:
        d = d[p]
    return d


def set_path(d, path: tuple, value) -> None:
    for p in path[:-1]:
        d = d[p]
    d[path[-1]] = value


def grid_variants(space) -> list[dict]:
    """The space with every grid_search replaced by one of its values: the cross product,
    first grid key outermost (so ``x`` in [1, 2], ``y`` in [a, b] gives x=1,y=a; x=1,y=b; ...)."""
    grids = [(path, leaf["grid_search"]) for path, leaf in walk(space) if is_grid(leaf)]
    if not grids:
        return [space]
    template = _without_grids(space)  # copied per variant without the (possibly long) grid lists
    out = []
    for values in itertools.product(*(vals for _, vals in grids)):
        variant = copy.deepcopy(template)
        for (path, _), v in zip(grids, values):
            set_path(variant, path, copy.deepcopy(v))
        out.extend(grid_variants(variant))  # a grid value may hold grids of its own
    return out


def _without_grids(space):
    if is_grid(space):
        return None
    if isinstance(space, dict):
        return {k: _without_grids(v) for k, v in space.items()}
    if isinstance(space, list):
        return [_without_grids(v) for v in space]
    return space


def count_grid(space) -> int:
    n = 1
    for _, leaf in walk(space):
        if is_grid(leaf):
            n *= len(leaf["grid_search"])
    return n


class _Unresolved(Exception):
    """A sample_from read a value that is itself an unresolved sample_from."""


class _SpecView(dict):
    """What a sample_from function receives: the config so far, as a dict with attribute
    access (``spec.lr``), and Ray's ``spec.config.lr``."""

    def __getitem__(self, key):
        v = dict.__getitem__(self, key)
        if isinstance(v, Function):
            raise _Unresolved(key)
        return v

    def __getattr__(self, name):
        if name == "config" and "config" not in self:
            return self
        try:
            return self[name]
        except KeyError:
            raise AttributeError(name) from None

    def get(self, key, default=None):
        return self[key] if key in self else default


def _view(value):
    if isinstance(value, dict):
        return _SpecView({k: _view(v) for k, v in value.items()})
    if isinstance(value, list):
        return [_view(v) for v in value]
    return value


def resolve(space, rng: np.random.Generator) -> dict:
    """One config from a space without grids: Domains sampled, then sample_from functions
    called (repeatedly, so one may depend on another).

    Raises:
        ValueError: sample_from functions that depend on each other in a cycle.
    """
    config = copy.deepcopy(space) if space is not None else {}
    functions = []
    for path, leaf in list(walk(config)):
        if isinstance(leaf, Function):
            functions.append(path)
        else:
            value = leaf.sample(rng)
            if path:
                set_path(config, path, value)
            else:
                config = value
    while functions:
        waiting = []
        for path in functions:
            fn = get_path(config, path)
            try:
                value = fn.func(_view(config)) if fn.pass_spec else fn.func()
            except _Unresolved:
                waiting.append(path)
                continue
            set_path(config, path, value)
        if len(waiting) == len(functions):
            keys = ", ".join(repr(path_str(p)) for p in waiting)
            raise ValueError(
                f"sample_from at {keys} read each other's values in a cycle; "
                "make at least one of them depend only on sampled values"
            )
        functions = waiting
    return config


def deep_update(base: dict, update: dict) -> dict:
    """``base`` with ``update``'s keys written in, recursing into nested dicts (copies)."""
    out = copy.deepcopy(base)
    for k, v in update.items():
        if isinstance(v, dict) and isinstance(out.get(k), dict) and not is_grid(out.get(k)):
            out[k] = deep_update(out[k], v)
        else:
            out[k] = copy.deepcopy(v)
    return out


def unflatten(flat: dict, sep: str = "/") -> dict:
    out: dict = {}
    for key, v in flat.items():
        parts = key.split(sep)
        d = out
        for p in parts[:-1]:
            d = d.setdefault(p, {})
        d[parts[-1]] = v
    return out


def make_rng(random_state) -> np.random.Generator:
    """A numpy Generator from an int seed, a Generator, a RandomState, or None (drawn from
    numpy's global state, so ``np.random.seed(...)`` makes runs repeatable)."""
    if isinstance(random_state, np.random.Generator):
        return random_state
    if isinstance(random_state, np.random.RandomState):
        return np.random.default_rng(random_state.randint(0, 2**31 - 1))
    if random_state is None:
        return np.random.default_rng(np.random.randint(0, 2**31 - 1))
    if isinstance(random_state, (int, np.integer)) and not isinstance(random_state, bool):
        return np.random.default_rng(int(random_state))
    raise TypeError(
        f"random_state must be an int seed, a numpy Generator or RandomState, or None; "
        f"got {type(random_state).__name__}"
    )


def varying_keys(space) -> list[str]:
    """Flattened names of the keys that vary (Domains and grids), for tables."""
    return [path_str(p) for p, _ in walk(space or {})]

"""Search-space primitives (the names and semantics of ``ray.tune``'s sampling functions).

Each function returns a :class:`Domain`: a description of where a hyperparameter's
values come from. ``grid_search`` returns the dict ``{"grid_search": [...]}`` as Ray's
does. Bounds are checked when the whole space is walked (``Tuner(...)``,
``BasicVariantGenerator``, ``OptunaSearch``), so the error can name the key.

Reference: docs.ray.io, "Tune Search Space API" (``ray.tune.search.sample``).
"""

from __future__ import annotations

import math
from decimal import Decimal
from typing import Any, Callable, Sequence

import numpy as np


class Domain:
    """Where one hyperparameter's values come from. ``sample(rng)`` draws one value."""

    def sample(self, rng: np.random.Generator) -> Any:
        raise NotImplementedError

    def validate(self) -> None:
        """Raise ValueError describing what is wrong with the bounds (no key: the caller adds it)."""

    def _q_str(self) -> str:
        q = getattr(self, "q", None)
        return f", q={q!r}" if q is not None else ""


def _quantize(value: float, q: float, lower: float | None, upper: float | None) -> float:
    """Round ``value`` to a multiple of ``q``, kept inside [lower, upper].

    Rounded with the decimal places of ``q`` so quniform(0, 1, 0.1) gives 0.3, not
    0.30000000000000004."""
    lo = math.ceil(lower / q - 1e-9) * q if lower is not None else -math.inf
    hi = math.floor(upper / q + 1e-9) * q if upper is not None else math.inf
    v = min(max(round(value / q) * q, lo), hi)
    exponent = Decimal(str(q)).as_tuple().exponent
    return round(v, max(0, -exponent)) if isinstance(exponent, int) else v


class Float(Domain):
    """A float in [lower, upper): uniform, or log-uniform when ``base`` is set;
    rounded to a multiple of ``q`` (upper bound then inclusive) when ``q`` is set."""

    def __init__(self, lower: float, upper: float, q: float | None = None, base: float | None = None):
        self.lower, self.upper, self.q, self.base = lower, upper, q, base

    @property
    def log(self) -> bool:
        return self.base is not None

    def validate(self) -> None:
        _check_number("lower", self.lower)
        _check_number("upper", self.upper)
        if not self.lower < self.upper:
            raise ValueError(f"{self!r}: lower must be < upper")
        if self.log and self.lower <= 0:
            raise ValueError(f"{self!r}: a log-scale range needs lower > 0")
        if self.log and not (self.base > 0 and self.base != 1):
            raise ValueError(f"{self!r}: base must be > 0 and != 1")
        _check_q(self)

    def sample(self, rng):
        if self.log:
            lo, hi = math.log(self.lower), math.log(self.upper)
            v = math.exp(rng.uniform(lo, hi))
        else:
            v = rng.uniform(self.lower, self.upper)
        if self.q is not None:
            return float(_quantize(v, self.q, self.lower, self.upper))
        return float(v)

    def __repr__(self):
        if self.log:
            name = "qloguniform" if self.q is not None else "loguniform"
            base = "" if self.base == 10 else f", base={self.base!r}"
            return f"{name}({self.lower!r}, {self.upper!r}{self._q_str()}{base})"
        name = "quniform" if self.q is not None else "uniform"
        return f"{name}({self.lower!r}, {self.upper!r}{self._q_str()})"


class Integer(Domain):
    """An integer in [lower, upper) (randint, lograndint) or [lower, upper] (qrandint,
    qlograndint: quantizing makes the upper bound inclusive, as in Ray).

    Attributes:
        lower (int), upper (int): the bounds as given.
        q (int | None): the step; values are multiples of ``q``.
        base (float | None): log scale when set.
        high (int): the largest value that can be drawn.
    """

    def __init__(self, lower: int, upper: int, q: int | None = None, base: float | None = None):
        self.lower, self.upper, self.q, self.base = lower, upper, q, base

    @property
    def log(self) -> bool:
        return self.base is not None

    @property
    def high(self) -> int:
        if self.q is None:
            return self.upper - 1
        return (self.upper // self.q) * self.q

    @property
    def low(self) -> int:
        if self.q is None:
            return self.lower
        return -((-self.lower) // self.q) * self.q  # ceil to a multiple of q

    def validate(self) -> None:
        for name in ("lower", "upper"):
            v = getattr(self, name)
            if not isinstance(v, (int, np.integer)) or isinstance(v, bool):
                raise ValueError(f"{self!r}: {name} must be an integer, got {v!r}")
        if not self.lower < self.upper:
            raise ValueError(f"{self!r}: lower must be < upper")
        if self.log and self.lower <= 0:
            raise ValueError(f"{self!r}: a log-scale range needs lower > 0")
        if self.log and not (self.base > 0 and self.base != 1):
            raise ValueError(f"{self!r}: base must be > 0 and != 1")
        if self.q is not None:
            if not isinstance(self.q, (int, np.integer)) or isinstance(self.q, bool) or self.q < 1:
                raise ValueError(f"{self!r}: q must be an integer >= 1")
            if self.low > self.high:
                raise ValueError(f"{self!r}: no multiple of q={self.q} lies in [{self.lower}, {self.upper}]")

    def sample(self, rng):
        if self.log:
            top = self.upper + 1 if self.q is not None else self.upper  # inclusive when quantized
            v = math.exp(rng.uniform(math.log(self.lower), math.log(top)))
            if self.q is None:
                return int(min(max(math.floor(v), self.lower), self.upper - 1))
            return int(_quantize(v, self.q, self.low, self.high))
        if self.q is None:
            return int(rng.integers(self.lower, self.upper))
        # Uniform over the multiples of q in [lower, upper].
        return int(rng.integers(self.low // self.q, self.high // self.q + 1) * self.q)

    def __repr__(self):
        prefix = "q" if self.q is not None else ""
        if self.log:
            base = "" if self.base == 10 else f", base={self.base!r}"
            return f"{prefix}lograndint({self.lower!r}, {self.upper!r}{self._q_str()}{base})"
        return f"{prefix}randint({self.lower!r}, {self.upper!r}{self._q_str()})"


class Normal(Domain):
    """A float drawn from N(mean, sd²), rounded to a multiple of ``q`` when set."""

    def __init__(self, mean: float = 0.0, sd: float = 1.0, q: float | None = None):
        self.mean, self.sd, self.q = mean, sd, q

    def validate(self) -> None:
        _check_number("mean", self.mean)
        _check_number("sd", self.sd)
        if not self.sd > 0:
            raise ValueError(f"{self!r}: sd must be > 0")
        _check_q(self)

    def sample(self, rng):
        v = rng.normal(self.mean, self.sd)
        return float(_quantize(v, self.q, None, None) if self.q is not None else v)

    def __repr__(self):
        return f"{'q' if self.q is not None else ''}randn({self.mean!r}, {self.sd!r}{self._q_str()})"


class Categorical(Domain):
    """One of ``categories``, each equally likely (values keep their Python types)."""

    def __init__(self, categories: Sequence):
        self.categories = list(categories)

    def validate(self) -> None:
        if not self.categories:
            raise ValueError("choice([]): the list of categories is empty; give at least one value")

    def sample(self, rng):
        return self.categories[int(rng.integers(len(self.categories)))]

    def __repr__(self):
        return f"choice({self.categories!r})"


class Function(Domain):
    """A value computed by ``func(spec)`` from the rest of the sampled config.

    ``spec`` is the config sampled so far: use ``spec["lr"]``, ``spec.lr`` or Ray's
    ``spec.config.lr``. ``func()`` with no argument is called as is."""

    def __init__(self, func: Callable):
        if not callable(func):
            raise TypeError(f"sample_from() takes a function, got {type(func).__name__}")
        self.func = func
        import inspect

        try:
            self.pass_spec = bool(inspect.signature(func).parameters)
        except (TypeError, ValueError):
            self.pass_spec = True

    def __repr__(self):
        return f"sample_from({getattr(self.func, '__name__', self.func)!r})"


def _check_number(name: str, v) -> None:
    if isinstance(v, bool) or not isinstance(v, (int, float, np.number)) or not math.isfinite(v):
        raise ValueError(f"{name} must be a finite number, got {v!r}")


def _check_q(d: Domain) -> None:
    q = getattr(d, "q", None)
    if q is not None and (isinstance(q, bool) or not isinstance(q, (int, float, np.number)) or not q > 0):
        raise ValueError(f"{d!r}: q must be a number > 0")


# --- the public sampling functions (ray.tune names) ------------------------------------


def uniform(lower: float, upper: float) -> Float:
    """A float uniformly in [lower, upper)."""
    return Float(lower, upper)


def quniform(lower: float, upper: float, q: float) -> Float:
    """A float uniformly in [lower, upper], rounded to a multiple of ``q``."""
    return Float(lower, upper, q=q)


def loguniform(lower: float, upper: float, base: float = 10) -> Float:
    """A float in [lower, upper) whose logarithm is uniform (lower > 0)."""
    return Float(lower, upper, base=base)


def qloguniform(lower: float, upper: float, q: float, base: float = 10) -> Float:
    """loguniform, rounded to a multiple of ``q`` (upper bound inclusive)."""
    return Float(lower, upper, q=q, base=base)


def randint(lower: int, upper: int) -> Integer:
    """An integer uniformly in [lower, upper): the upper bound is exclusive."""
    return Integer(lower, upper)


def qrandint(lower: int, upper: int, q: int = 1) -> Integer:
    """A multiple of ``q`` uniformly in [lower, upper]: the upper bound is inclusive."""
    return Integer(lower, upper, q=q)


def lograndint(lower: int, upper: int, base: float = 10) -> Integer:
    """An integer in [lower, upper) whose logarithm is uniform (lower > 0)."""
    return Integer(lower, upper, base=base)


def qlograndint(lower: int, upper: int, q: int, base: float = 10) -> Integer:
    """lograndint rounded to a multiple of ``q``, upper bound inclusive."""
    return Integer(lower, upper, q=q, base=base)


def randn(mean: float = 0.0, sd: float = 1.0) -> Normal:
    """A float from the normal distribution N(mean, sd²)."""
    return Normal(mean, sd)


def qrandn(mean: float, sd: float, q: float) -> Normal:
    """randn rounded to a multiple of ``q``."""
    return Normal(mean, sd, q=q)


def choice(categories: Sequence) -> Categorical:
    """One of ``categories`` (a non-empty list), uniformly."""
    if isinstance(categories, (str, bytes, dict)) or not hasattr(categories, "__iter__"):
        raise TypeError(f"choice() takes a list of values, got {type(categories).__name__}: {categories!r}")
    return Categorical(categories)


def sample_from(func: Callable) -> Function:
    """A value computed from the other sampled values: ``sample_from(lambda spec: 2 * spec.config.x)``
    (``spec["x"]`` and ``spec.x`` work too)."""
    return Function(func)


def grid_search(values) -> dict:
    """Every value in ``values`` (a non-empty list). Several grids are crossed (their
    product), and the whole grid is repeated ``num_samples`` times, as in Ray Tune."""
    if isinstance(values, (str, bytes, dict)) or not hasattr(values, "__iter__"):
        raise TypeError(f"grid_search() takes a list of values, got {type(values).__name__}: {values!r}")
    return {"grid_search": list(values)}

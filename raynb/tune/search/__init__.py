"""Search spaces and search algorithms (``ray.tune.search``)."""

from .basic_variant import BasicVariantGenerator
from .concurrency_limiter import ConcurrencyLimiter
from .sample import (
    Categorical,
    Domain,
    Float,
    Function,
    Integer,
    Normal,
    choice,
    grid_search,
    lograndint,
    loguniform,
    qlograndint,
    qloguniform,
    qrandint,
    qrandn,
    quniform,
    randint,
    randn,
    sample_from,
    uniform,
)
from .searcher import Searcher


def __getattr__(name):
    if name == "OptunaSearch":  # imported on use: optuna is an optional, slow-to-import library
        from .optuna import OptunaSearch

        return OptunaSearch
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = [
    "BasicVariantGenerator",
    "ConcurrencyLimiter",
    "OptunaSearch",
    "Searcher",
    "Domain",
    "Float",
    "Integer",
    "Normal",
    "Categorical",
    "Function",
    "choice",
    "grid_search",
    "lograndint",
    "loguniform",
    "qlograndint",
    "qloguniform",
    "qrandint",
    "qrandn",
    "quniform",
    "randint",
    "randn",
    "sample_from",
    "uniform",
]

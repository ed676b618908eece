"""Search spaces and search algorithms (``ray.tune.search``)."""

from .basic_variant import BasicVariantGenerator
from .concurrency_limiter import ConcurrencyLimiter
from .library_searcher import UNDEFINED_METRIC_MODE, UNDEFINED_SEARCH_SPACE, UNRESOLVED_SEARCH_SPACE
from .repeater import Repeater
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
from .search_generator import SearchAlgorithm, SearchGenerator
from .searcher import Searcher

# Searchers over optional libraries: imported on use (slow imports, maybe not installed).
_LIBRARY_SEARCHERS = {
    "OptunaSearch": "optuna",
    "HyperOptSearch": "hyperopt",
    "BayesOptSearch": "bayesopt",
    "NevergradSearch": "nevergrad",
    "ZOOptSearch": "zoopt",
    "TuneBOHB": "bohb",
    "HEBOSearch": "hebo",
    "AxSearch": "ax",
}


def __getattr__(name):
    if name in _LIBRARY_SEARCHERS:
        import importlib

        return getattr(importlib.import_module(f".{_LIBRARY_SEARCHERS[name]}", __name__), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = [
    "BasicVariantGenerator",
    "ConcurrencyLimiter",
    "OptunaSearch",
    "HyperOptSearch",
    "BayesOptSearch",
    "NevergradSearch",
    "ZOOptSearch",
    "TuneBOHB",
    "HEBOSearch",
    "AxSearch",
    "Repeater",
    "SearchAlgorithm",
    "SearchGenerator",
    "UNRESOLVED_SEARCH_SPACE",
    "UNDEFINED_SEARCH_SPACE",
    "UNDEFINED_METRIC_MODE",
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

"""Ray Tune's ``HEBOSearch`` (Huawei's HEBO library): not served.

HEBO (``pip install HEBO``, 0.3.6) requires numpy<1.25, and raynb's other dependencies
(torch, pandas, scikit-learn, Ray) run on numpy 2; installing HEBO would replace numpy
and break them. Importing ``HEBOSearch`` raises an ImportError saying so; use
``OptunaSearch``, ``HyperOptSearch`` or ``BayesOptSearch`` instead.
"""

from __future__ import annotations

_WHY = (
    "HEBOSearch is not served by raynb: the HEBO library (pip install HEBO) requires "
    "numpy<1.25, which would replace the numpy 2 that torch, pandas and Ray use here; "
    "use OptunaSearch, HyperOptSearch or BayesOptSearch (raynb.tune.search) instead"
)


def __getattr__(name):
    if name == "HEBOSearch":
        raise ImportError(_WHY)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")

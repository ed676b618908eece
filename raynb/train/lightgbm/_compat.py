"""Import lightgbm, or say which extra installs it."""
from __future__ import annotations

EXTRA_HINT = 'pip install "raynb[lightgbm]"'


def import_lightgbm():
    """The ``lightgbm`` module.

    Raises:
        ImportError: it is not installed (names the extra).
    """
    try:
        import lightgbm
    except ModuleNotFoundError as e:
        if e.name and e.name.split(".")[0] != "lightgbm":
            raise
        raise ImportError(f"raynb.train.lightgbm needs lightgbm, which is not installed: {EXTRA_HINT}") from None
    return lightgbm

"""Which PyTorch Lightning is installed: ``lightning`` (``lightning.pytorch``) or the older
``pytorch_lightning`` name; both are the same package's API."""
from __future__ import annotations

EXTRA_HINT = 'pip install "raynb[lightning]"'


def import_lightning():
    """The ``lightning.pytorch`` module, else ``pytorch_lightning``.

    Raises:
        ImportError: neither is installed (names the extra to install).
    """
    try:
        import lightning.pytorch as pl
    except ModuleNotFoundError:
        try:
            import pytorch_lightning as pl
        except ModuleNotFoundError:
            raise ImportError("raynb.train.lightning needs PyTorch Lightning, which is not installed: "
                              f"{EXTRA_HINT}") from None
    return pl


def lightning_environment_class(pl):
    """Lightning's ``LightningEnvironment`` of the same package as ``pl``."""
    if pl.__name__.startswith("lightning."):
        from lightning.pytorch.plugins.environments import LightningEnvironment
    else:
        from pytorch_lightning.plugins.environments import LightningEnvironment
    return LightningEnvironment

"""Import transformers, or say which extra installs it."""
from __future__ import annotations

EXTRA_HINT = 'pip install "raynb[transformers]"'


def import_transformers():
    """The ``transformers`` module.

    Raises:
        ImportError: it is not installed (names the extra, which also installs Accelerate).
    """
    try:
        import transformers
        import transformers.trainer  # noqa: F401
        import transformers.trainer_callback  # noqa: F401
    except ModuleNotFoundError as e:
        if e.name and e.name.split(".")[0] not in ("transformers", "accelerate"):
            raise
        raise ImportError("raynb.train.huggingface.transformers needs transformers and accelerate, "
                          f"which are not installed: {EXTRA_HINT}") from None
    return transformers

"""``ray.data.preprocessor``: the ``Preprocessor`` base class (see ``preprocessors``)."""

from .preprocessors import Preprocessor, PreprocessorNotFittedException

__all__ = ["Preprocessor", "PreprocessorNotFittedException"]

"""Ray 2.60's per-framework checkpoint classes: ``TorchCheckpoint``, ``XGBoostCheckpoint``,
``LightGBMCheckpoint``, ``TensorflowCheckpoint``.

Ray 2.60 keeps them as deprecated classes that still work: making one warns (use
``ray.train.Checkpoint`` directly), and ``from_model`` / ``get_model`` save and load the model
under the file name Ray uses (``model.pt``, ``model.json``, ``model.txt``, a Keras file named
in the checkpoint's metadata). raynb's are the same, on :class:`raynb.train.Checkpoint`, so a
directory written by one loads with the other. Each framework is imported when used.
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
import warnings
from pathlib import Path

from .checkpoint import Checkpoint

_METADATA_FILE = ".metadata.json"  # Ray's Checkpoint metadata file in the directory


class _Deprecated(Checkpoint):
    def __init__(self, *args, **kwargs):
        warnings.warn(
            f"{type(self).__name__} is deprecated (as in Ray 2.60): use raynb.train.Checkpoint "
            "directly (Checkpoint.from_directory(d) of a directory you saved the model into)",
            DeprecationWarning,
            stacklevel=2,
        )
        super().__init__(*args, **kwargs)

    @classmethod
    def _new_dir(cls, path: str | None) -> Path:
        d = Path(path or tempfile.mkdtemp())
        if not d.is_dir():
            raise ValueError(
                f"{cls.__name__}.from_model(path={str(d)!r}): path must be an existing directory"
            )
        return d

    def _file(self, name: str) -> str:
        f = os.path.join(self.path, name)
        if not os.path.exists(f):
            raise RuntimeError(
                f"{type(self).__name__}.get_model(): {name} is not in {self.path}; make the checkpoint "
                f"with {type(self).__name__}.from_model(...)"
            )
        return f


class TorchCheckpoint(_Deprecated):
    """A checkpoint holding a torch model or its state dict (``model.pt``)."""

    MODEL_FILENAME = "model.pt"

    @classmethod
    def from_state_dict(cls, state_dict: dict, *, preprocessor=None) -> "TorchCheckpoint":
        """Save ``state_dict`` (a DDP ``module.`` prefix removed) as a new checkpoint."""
        import torch
        from torch.nn.modules.utils import consume_prefix_in_state_dict_if_present

        d = cls._new_dir(None)
        state = dict(state_dict)
        consume_prefix_in_state_dict_if_present(state, "module.")
        torch.save(state, d / cls.MODEL_FILENAME)
        return cls(d)

    @classmethod
    def from_model(cls, model, *, preprocessor=None) -> "TorchCheckpoint":
        """Save the whole ``nn.Module`` (pickled: load only checkpoints you trust)."""
        import torch

        d = cls._new_dir(None)
        torch.save(model, d / cls.MODEL_FILENAME)
        return cls(d)

    def get_model(self, model=None):
        """The saved model; for a saved state dict, ``model`` (an ``nn.Module``) loaded with it.

        Raises:
            RuntimeError: no ``model.pt``; ValueError: a state dict and no ``model`` given."""
        import torch

        saved = torch.load(self._file(self.MODEL_FILENAME), map_location="cpu", weights_only=False)
        if isinstance(saved, torch.nn.Module):
            if model is not None:
                warnings.warn(
                    "TorchCheckpoint holds the whole model; the model argument is not used", stacklevel=2
                )
            return saved
        if model is None:
            raise ValueError(
                "TorchCheckpoint.get_model(): the checkpoint holds a state dict; "
                "pass the model to load it into"
            )
        model.load_state_dict(saved)
        return model


class XGBoostCheckpoint(_Deprecated):
    """A checkpoint holding an ``xgboost.Booster`` (``model.json``)."""

    MODEL_FILENAME = "model.json"

    @classmethod
    def from_model(cls, booster, *, preprocessor=None, path: str | None = None) -> "XGBoostCheckpoint":
        d = cls._new_dir(path)
        booster.save_model(str(d / cls.MODEL_FILENAME))
        return cls(d)

    def get_model(self):
        import xgboost

        booster = xgboost.Booster()
        booster.load_model(self._file(self.MODEL_FILENAME))
        return booster


class LightGBMCheckpoint(_Deprecated):
    """A checkpoint holding a ``lightgbm.Booster`` (``model.txt``)."""

    MODEL_FILENAME = "model.txt"

    @classmethod
    def from_model(cls, booster, *, preprocessor=None, path: str | None = None) -> "LightGBMCheckpoint":
        d = cls._new_dir(path)
        booster.save_model(str(d / cls.MODEL_FILENAME))
        return cls(d)

    def get_model(self):
        import lightgbm

        return lightgbm.Booster(model_file=self._file(self.MODEL_FILENAME))


class TensorflowCheckpoint(_Deprecated):
    """A checkpoint holding a Keras model; its file's name is in the checkpoint's metadata."""

    MODEL_FILENAME_KEY = "_model_filename"

    @classmethod
    def _named(cls, d: Path, filename: str) -> "TensorflowCheckpoint":
        (d / _METADATA_FILE).write_text(json.dumps({cls.MODEL_FILENAME_KEY: filename}))
        return cls(d)

    @classmethod
    def from_model(cls, model, *, preprocessor=None) -> "TensorflowCheckpoint":
        d = cls._new_dir(None)
        model.save(str(d / "model.keras"))
        return cls._named(d, "model.keras")

    @classmethod
    def from_h5(cls, file_path: str, *, preprocessor=None) -> "TensorflowCheckpoint":
        if not os.path.isfile(file_path) or not file_path.endswith(".h5"):
            raise ValueError(
                f"TensorflowCheckpoint.from_h5({file_path!r}): give the path of an existing .h5 file"
            )
        d = cls._new_dir(None)
        shutil.copy(file_path, d / os.path.basename(file_path))
        return cls._named(d, os.path.basename(file_path))

    @classmethod
    def from_saved_model(cls, dir_path: str, *, preprocessor=None) -> "TensorflowCheckpoint":
        if not os.path.isdir(dir_path):
            raise ValueError(
                f"TensorflowCheckpoint.from_saved_model({dir_path!r}): give a SavedModel directory"
            )
        d = Path(tempfile.mkdtemp())
        shutil.copytree(dir_path, d, dirs_exist_ok=True)
        return cls._named(d, ".")

    def get_model(self):
        try:
            name = json.loads(Path(self.path, _METADATA_FILE).read_text())[self.MODEL_FILENAME_KEY]
        except (OSError, ValueError, KeyError):
            raise ValueError(
                f"TensorflowCheckpoint.get_model(): {self.path} does not name its model file "
                f"({_METADATA_FILE}); make the checkpoint with TensorflowCheckpoint.from_model(...)"
            ) from None
        from tensorflow import keras

        return keras.models.load_model(os.path.join(self.path, name))

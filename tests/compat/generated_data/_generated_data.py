"""Generated data in place of the downloads of Ray's shipped examples (a test-only shim).

``install()`` puts an import hook first on ``sys.meta_path``; it imports nothing heavy
itself (a torch rank must not import TensorFlow), and it acts only when a script imports:

- ``torchvision`` (not installed here): a stand-in with ``datasets.MNIST`` /
  ``FashionMNIST`` / ``CIFAR10`` / ``FakeData`` (random images of the real shapes and
  dtypes, a few hundred samples) and ``transforms`` (``Compose``, ``ToTensor``,
  ``Normalize``, ``RandomCrop``, ``RandomHorizontalFlip``). Where the real torchvision is
  installed, its MNIST / FashionMNIST / CIFAR10 classes are replaced instead.
- ``keras.datasets`` / ``tf.keras.datasets`` (Keras 3 and tf-keras): ``mnist``,
  ``fashion_mnist``, ``cifar10`` ``load_data`` return generated arrays of the real shapes.
- ``datasets.load_dataset("ylecun/mnist")`` (Hugging Face, not installed here): a dict of
  splits of ``{"image": PIL image, "label": int}`` rows.
- ``read_csv("s3://anonymous@air-example-data/regression.csv")`` of ``raynb.data`` (and
  of ``ray.data``): a generated local CSV of the same columns (``x000``..``x099``, ``y``).

Sizes: ``RAYNB_GENERATED_TRAIN`` (default 256) training and ``RAYNB_GENERATED_TEST`` (64)
test samples, so that every script takes seconds. The CSV is written once into
``RAYNB_GENERATED_DIR`` (the test gives its temporary directory; default: the temp dir).
"""

from __future__ import annotations

import importlib.abc
import importlib.machinery
import importlib.util
import os
import sys

N_TRAIN = int(os.environ.get("RAYNB_GENERATED_TRAIN", "256"))
N_TEST = int(os.environ.get("RAYNB_GENERATED_TEST", "64"))
REGRESSION_CSV = "s3://anonymous@air-example-data/regression.csv"


def _images(n, shape, seed):
    import numpy as np

    rng = np.random.default_rng(seed)
    return rng.integers(0, 256, size=(n, *shape), dtype=np.uint8), rng.integers(0, 10, size=n).astype(
        np.uint8
    )


# --- Keras ---------------------------------------------------------------------------------


def _keras_load_data(shape, label_shape=None):
    def load_data(*args, **kwargs):
        x_train, y_train = _images(N_TRAIN, shape, 0)
        x_test, y_test = _images(N_TEST, shape, 1)
        if label_shape:
            y_train, y_test = y_train.reshape(-1, 1), y_test.reshape(-1, 1)
        return (x_train, y_train), (x_test, y_test)

    return load_data


_KERAS = {
    "mnist": _keras_load_data((28, 28)),
    "fashion_mnist": _keras_load_data((28, 28)),
    "cifar10": _keras_load_data((32, 32, 3), label_shape=True),
}


def _patch_keras(module):
    module.load_data = _KERAS[module.__name__.rsplit(".", 1)[1]]


# --- torchvision ---------------------------------------------------------------------------


def _torchvision_datasets():
    import torch
    from torch.utils.data import Dataset

    class _Generated(Dataset):
        SHAPE = (28, 28)

        def __init__(
            self, root=None, train=True, transform=None, target_transform=None, download=False, **kw
        ):
            self.data, labels = _images(N_TRAIN if train else N_TEST, self.SHAPE, 0 if train else 1)
            self.targets = [int(t) for t in labels]
            self.transform, self.target_transform = transform, target_transform
            self.classes = [str(i) for i in range(10)]

        def __len__(self):
            return len(self.data)

        def __getitem__(self, i):
            from PIL import Image

            img, target = Image.fromarray(self.data[i]), self.targets[i]
            if self.transform is not None:
                img = self.transform(img)
            if self.target_transform is not None:
                target = self.target_transform(target)
            return img, target

    class MNIST(_Generated):
        pass

    class FashionMNIST(_Generated):
        pass

    class CIFAR10(_Generated):
        SHAPE = (32, 32, 3)

    class FakeData(Dataset):
        def __init__(self, size=1000, image_size=(3, 224, 224), num_classes=10, transform=None, **kw):
            c, h, w = image_size
            self._gen = type("_G", (_Generated,), {"SHAPE": (h, w, c) if c != 1 else (h, w)})
            self._inner = self._gen(transform=transform)
            self._inner.data, labels = _images(size, self._gen.SHAPE, 2)
            self._inner.targets = [int(t) % num_classes for t in labels]

        def __len__(self):
            return len(self._inner)

        def __getitem__(self, i):
            return self._inner[i]

    del torch
    return {"MNIST": MNIST, "FashionMNIST": FashionMNIST, "CIFAR10": CIFAR10, "FakeData": FakeData}


def _torchvision_transforms():
    import numpy as np
    import torch

    class Compose:
        def __init__(self, transforms):
            self.transforms = list(transforms)

        def __call__(self, x):
            for t in self.transforms:
                x = t(x)
            return x

    class ToTensor:
        def __call__(self, pic):
            a = np.array(pic)
            a = a[:, :, None] if a.ndim == 2 else a
            return torch.from_numpy(np.ascontiguousarray(a.transpose(2, 0, 1))).float().div(255.0)

    class Normalize:
        def __init__(self, mean, std, inplace=False):
            self.mean, self.std = torch.tensor(mean), torch.tensor(std)

        def __call__(self, t):
            return (t - self.mean[:, None, None]) / self.std[:, None, None]

    class _Identity:
        def __init__(self, *args, **kwargs):
            pass

        def __call__(self, x):
            return x

    class RandomCrop(_Identity):
        pass

    class RandomHorizontalFlip(_Identity):
        pass

    class Lambda:
        def __init__(self, fn):
            self.fn = fn

        def __call__(self, x):
            return self.fn(x)

    return {k: v for k, v in locals().items() if isinstance(v, type)}


def _hf_datasets():
    def load_dataset(path, *args, **kwargs):
        from PIL import Image

        if "mnist" not in str(path).lower():
            raise FileNotFoundError(f"the generated-data shim has no {path!r} (only MNIST)")
        out = {}
        for split, n, seed in (("train", N_TRAIN, 0), ("test", N_TEST, 1)):
            x, y = _images(n, (28, 28), seed)
            out[split] = [{"image": Image.fromarray(img), "label": int(t)} for img, t in zip(x, y)]
        return out

    return {"load_dataset": load_dataset}


# --- Ray Data's s3 CSV ---------------------------------------------------------------------


def _regression_csv() -> str:
    import tempfile

    folder = os.environ.get("RAYNB_GENERATED_DIR") or tempfile.gettempdir()
    path = os.path.join(folder, f"raynb-generated-regression-{os.getuid()}-{N_TRAIN}.csv")
    if not os.path.exists(path):
        import numpy as np
        import pandas as pd

        rng = np.random.default_rng(0)
        x = rng.normal(size=(N_TRAIN, 100)).astype("float64")
        frame = pd.DataFrame(x, columns=[f"x{i:03d}" for i in range(100)])
        frame["y"] = x[:, :10].sum(axis=1) + 0.1 * rng.normal(size=N_TRAIN)
        tmp = f"{path}.{os.getpid()}"
        frame.to_csv(tmp, index=False)
        os.replace(tmp, path)
    return path


def _patch_read_csv(module):
    real = getattr(module, "read_csv", None)
    if real is None or getattr(real, "_generated", False):
        return

    def read_csv(paths, *args, **kwargs):
        if paths == REGRESSION_CSV or (isinstance(paths, list) and paths == [REGRESSION_CSV]):
            paths = _regression_csv()
        return real(paths, *args, **kwargs)

    read_csv._generated = True
    module.read_csv = read_csv


# --- the import hook -----------------------------------------------------------------------

_STANDINS = {
    "torchvision": lambda: {},
    "torchvision.datasets": _torchvision_datasets,
    "torchvision.transforms": _torchvision_transforms,
    "datasets": _hf_datasets,
}
_PATCHES = {
    **{f"{pkg}.src.datasets.{name}": _patch_keras for pkg in ("keras", "tf_keras") for name in _KERAS},
    "raynb.data": _patch_read_csv,
    "ray.data": _patch_read_csv,
}


def _patch_real_torchvision(module):
    module.__dict__.update({k: v for k, v in _torchvision_datasets().items() if k != "FakeData"})


def _placeholder(module_name: str, attr: str):
    """What a stand-in module gives for a name it lacks (libraries such as torchmetrics
    import torchvision's models when torchvision is found): a class that fails when used."""

    def fail(*args, **kwargs):
        raise NotImplementedError(f"the generated-data shim's {module_name} has no {attr}")

    return type(attr, (), {"__init__": fail, "__call__": fail, "__getattr__": lambda self, a: fail()})


def _standin_getattr(module_name: str):
    def __getattr__(attr):
        if attr.startswith("__"):
            raise AttributeError(attr)
        return _placeholder(module_name, attr)

    return __getattr__


class _StandInLoader(importlib.abc.Loader):
    def create_module(self, spec):
        return None

    def exec_module(self, module):
        name = module.__name__
        if name == "torchvision":
            module.__path__ = []
            module.__version__ = "0.0+generated"
        elif name.startswith("torchvision."):
            module.__path__ = []
        module.__getattr__ = _standin_getattr(name)
        module.__dict__.update(_STANDINS.get(name, dict)())
        if name == "torchvision":
            for sub in ("datasets", "transforms"):
                setattr(module, sub, importlib.import_module(f"torchvision.{sub}"))


class _PatchingLoader(importlib.abc.Loader):
    def __init__(self, real, patch):
        self.real, self.patch = real, patch

    def create_module(self, spec):
        return self.real.create_module(spec)

    def exec_module(self, module):
        self.real.exec_module(module)
        self.patch(module)


class GeneratedDataFinder(importlib.abc.MetaPathFinder):
    def __init__(self):
        self._missing: dict[str, bool] = {}

    def _real_spec(self, name, path, target):
        for finder in sys.meta_path:
            if finder is self or not hasattr(finder, "find_spec"):
                continue
            spec = finder.find_spec(name, path, target)
            if spec is not None:
                return spec
        return None

    def find_spec(self, name, path=None, target=None):
        top = name.split(".")[0]
        if (name in _STANDINS or top == "torchvision") and self._is_missing(top):
            return importlib.machinery.ModuleSpec(name, _StandInLoader(), is_package=top == "torchvision")
        patch = _PATCHES.get(name) or (_patch_real_torchvision if name == "torchvision.datasets" else None)
        if patch is None:
            return None
        spec = self._real_spec(name, path, target)
        if spec is not None and spec.loader is not None:
            spec.loader = _PatchingLoader(spec.loader, patch)
        return spec

    def _is_missing(self, top: str) -> bool:
        if top not in self._missing:
            self._missing[top] = importlib.machinery.PathFinder.find_spec(top) is None
        return self._missing[top]


def install() -> None:
    """Put the hook first on ``sys.meta_path`` (once) and patch what is imported already."""
    if any(isinstance(f, GeneratedDataFinder) for f in sys.meta_path):
        return
    sys.meta_path.insert(0, GeneratedDataFinder())
    for name, patch in _PATCHES.items():
        if name in sys.modules:
            patch(sys.modules[name])

"""``ray.train.torch``'s smaller helpers: ``TorchConfig``, ``enable_reproducibility``,
``prepare_optimizer``, ``backward``.

raynb sets up each run's process group itself (gloo on CPU ranks, NCCL on GPU ranks),
so ``TorchConfig`` is accepted and its backend checked against that choice; the others
do on a rank what Ray's do.
"""

from __future__ import annotations

import os
import random

from ..client.no_effect import accepted_no_effect
from .backend_config import BackendConfig

_BACKENDS = (None, "gloo", "nccl")


class TorchConfig(BackendConfig):
    """Ray's process-group settings (``TorchTrainer(torch_config=...)``).

    Args:
        backend (str | None): "gloo" or "nccl"; None: raynb's choice (gloo on CPU, NCCL
            with GPUs), which any value here leaves as it is (said once).
        init_method (str): "env" or "tcp"; the ranks rendezvous through raynb's head.
        timeout_s (int): seconds a collective may wait (Ray's default 1800).

    Raises:
        ValueError: a backend other than those, or a timeout below 1.
    """

    def __init__(self, backend: str | None = None, init_method: str = "env", timeout_s: int = 1800):
        if backend not in _BACKENDS:
            raise ValueError(f"TorchConfig(backend={backend!r}): use 'gloo', 'nccl' or None (raynb's choice)")
        if init_method not in ("env", "tcp"):
            raise ValueError(f"TorchConfig(init_method={init_method!r}): use 'env' or 'tcp'")
        if not timeout_s or timeout_s < 1:
            raise ValueError(f"TorchConfig(timeout_s={timeout_s!r}): give seconds >= 1")
        self.backend, self.init_method, self.timeout_s = backend, init_method, timeout_s

    @property
    def framework(self) -> str:
        return "torch"

    def to_dict(self) -> dict:
        return {"backend": self.backend, "init_method": self.init_method, "timeout_s": self.timeout_s}

    def note(self) -> None:
        """Say once that these settings leave raynb's process group as it is."""
        if (self.backend, self.init_method, self.timeout_s) != (None, "env", 1800):
            accepted_no_effect(
                "TorchConfig(backend=, init_method=, timeout_s=)",
                "raynb sets up each run's process group (gloo on CPU ranks, NCCL on GPU ranks) "
                "through its head",
            )

    def __repr__(self) -> str:
        return (
            f"TorchConfig(backend={self.backend!r}, init_method={self.init_method!r}, "
            f"timeout_s={self.timeout_s})"
        )


def enable_reproducibility(seed: int = 0) -> None:
    """Seed Python's, numpy's and torch's generators with ``seed`` and make torch use
    deterministic algorithms (cuDNN benchmarking off), as Ray's; call it first in the
    training function. Slower kernels may follow."""
    import numpy as np
    import torch

    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)
    torch.use_deterministic_algorithms(True)
    torch.backends.cudnn.benchmark = False
    # CUDA's deterministic cuBLAS needs a fixed workspace (torch's error says so otherwise).
    os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")


def accelerate(amp: bool = False) -> None:
    """Ray's old mixed-precision switch: Ray 2.60 raises ``DeprecationWarning`` for it, and so
    does raynb.

    Raises:
        DeprecationWarning: always; it names what to use instead."""
    raise DeprecationWarning(
        "raynb.train.torch.accelerate() is deprecated (Ray 2.60 raises for it too): use torch's "
        "mixed precision directly (torch.autocast and torch.amp.GradScaler) in the training "
        "function, or Lightning / Hugging Face Accelerate (raynb.train.lightning, Accelerator())"
    )


def prepare_optimizer(optimizer):
    """The optimizer as given (Ray's wrapper for its old mixed-precision path; Ray 2.60
    returns it unchanged too)."""
    return optimizer


def backward(tensor) -> None:
    """``tensor.backward()`` (Ray's hook for its mixed-precision scaler)."""
    tensor.backward()

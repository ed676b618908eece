"""``tune.with_parameters`` and ``tune.with_resources`` (``ray.tune.trainable.util``).

``with_parameters(train, data=big)`` puts each large object in shared memory once per node
for the whole ``fit()`` (``client.bulk``, the data key every trial of a fit shares), as Ray
puts it in its object store once: a trial's payload carries a small handle, and each trial
unpickles the object from that node's copy. ``with_resources`` reads Ray's resource
requests: a GPU gives each trial a worker with one CUDA device; ``{"cpu": N}`` gives its rank
N torch threads (Ray reserves N CPUs and sets ``OMP_NUM_THREADS`` to them) and lets no more
trials run at once than the cluster's CPUs hold (``tuner._plan_concurrency``); memory amounts
have no effect.
"""

from __future__ import annotations

import functools

import cloudpickle

from ..client import bulk
from ..client.no_effect import accepted_no_effect
from ..train.config import ScalingConfig
from ..train.resources import PlacementGroupFactory

# Objects that pickle to fewer bytes travel in each trial's payload (cheaper than a segment).
SHARED_MIN_BYTES = 64 << 10


class _Parameter:
    """One object given to ``with_parameters``: pickled once, placed in shared memory when
    a trial's payload is pickled under a data key (``bulk.active``)."""

    def __init__(self, name: str, value):
        self.name, self.value = name, value
        self._blob = None

    def __reduce__(self):
        scope = bulk.current()
        if scope is None:
            return _Parameter, (self.name, self.value)
        if self._blob is None:
            import numpy as np

            self._blob = np.frombuffer(cloudpickle.dumps(self.value), dtype=np.uint8)
        if self._blob.nbytes < SHARED_MIN_BYTES:
            return _Parameter, (self.name, self.value)
        block = scope.place(
            ("with_parameters", id(self)),
            self,
            {"p": self._blob},
            f"with_parameters({self.name}=...) ({self._blob.nbytes} bytes pickled)",
        )
        return _from_shared, (self.name, block)


def _from_shared(name: str, block) -> _Parameter:
    """On a rank: the object, unpickled from this node's shared-memory copy."""
    return _Parameter(name, cloudpickle.loads(memoryview(block.arrays(writeable=False)["p"])))


def with_parameters(trainable, **kwargs):
    """``trainable`` with ``kwargs`` bound (``ray.tune.with_parameters``):
    ``Tuner(with_parameters(train, data=data))`` calls ``train(config, data=data)`` in each
    trial. Each value that pickles to at least 64 KiB is put in shared memory once per node
    for the whole ``fit()``, not shipped with every trial.

    Raises:
        TypeError: ``trainable`` is not a function."""
    params = {k: _Parameter(k, v) for k, v in kwargs.items()}
    if _is_trainable_class(trainable):  # Ray passes them to setup(config, **params)

        def setup(self, config):
            return trainable.setup(self, config, **{k: p.value for k, p in params.items()})

        return type(trainable.__name__, (trainable,), {"setup": setup, "_raynb_parameters": params})
    if not callable(trainable) or isinstance(trainable, type):
        raise TypeError(
            f"with_parameters() takes a function f(config, **params), got {type(trainable).__name__}"
        )

    @functools.wraps(trainable)
    def inner(config):
        return trainable(config, **{k: p.value for k, p in params.items()})

    inner._raynb_parameters = params
    inner._raynb_scaling = getattr(trainable, "_raynb_scaling", None)
    return inner


def _is_trainable_class(obj) -> bool:
    from .trainable import Trainable

    return isinstance(obj, type) and issubclass(obj, Trainable)


def _scaling_of(resources) -> ScalingConfig:
    if isinstance(resources, ScalingConfig):
        return resources
    if isinstance(resources, (list, tuple)):  # Ray's bundles, as PlacementGroupFactory takes them
        resources = PlacementGroupFactory(list(resources))
    if isinstance(resources, PlacementGroupFactory):
        resources = resources.required_resources
    if not isinstance(resources, dict):
        raise TypeError(
            f"with_resources() takes a dict ({{'cpu': 2, 'gpu': 1}}), a PlacementGroupFactory or a "
            f"ScalingConfig, got {type(resources).__name__}; a function of the config is not served: "
            "give the request itself"
        )
    amounts = {str(k).upper(): v for k, v in resources.items()}
    unknown = sorted(k for k in amounts if k not in ("CPU", "GPU", "MEMORY"))
    if unknown:
        raise ValueError(
            f"with_resources({resources!r}): raynb serves CPU and GPU requests; {unknown} "
            "(custom resources) are not served: drop them"
        )
    gpus = amounts.get("GPU", 0)
    if gpus and gpus != 1:
        raise ValueError(
            f"with_resources({resources!r}): a trial of a function gets one worker with one GPU; "
            "for several, use a TorchTrainer with ScalingConfig(num_workers=N, use_gpu=True)"
        )
    if amounts.get("MEMORY"):
        accepted_no_effect("with_resources(memory=)", "raynb does not reserve memory for a trial")
    cpus = amounts.get("CPU")
    # Ray's meaning: each trial holds that many CPUs. Here: its rank runs that many torch
    # threads, and no more trials run at once than the cluster's CPUs hold (tuner.py).
    return ScalingConfig(
        num_workers=1, use_gpu=bool(gpus), resources_per_worker={"CPU": cpus} if cpus else None
    )


def with_resources(trainable, resources):
    """``trainable`` with a per-trial resource request (``ray.tune.with_resources``).

    Args:
        trainable: a function ``f(config)`` (or one from ``with_parameters``).
        resources (dict | list[dict] | PlacementGroupFactory | ScalingConfig): ``{"cpu": 2, "gpu": 1}``
            or bundles (their sum counts);
            a GPU gives each trial one worker with one CUDA device; a ScalingConfig runs each
            trial on its ``num_workers`` ranks.

    Raises:
        TypeError: a trainable that is not a function, a request of another type.
        ValueError: custom resources, or more than one GPU for a function trial.
    """
    scaling = _scaling_of(resources)
    if _is_trainable_class(trainable):
        return type(trainable.__name__, (trainable,), {"_raynb_scaling": scaling})
    if not callable(trainable) or isinstance(trainable, type):
        raise TypeError(f"with_resources() takes a function f(config), got {type(trainable).__name__}")

    @functools.wraps(trainable)
    def inner(config):
        return trainable(config)

    inner._raynb_scaling = scaling
    return inner

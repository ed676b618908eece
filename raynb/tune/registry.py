"""Named trainables (Ray Tune's ``tune.register_trainable``): a Tuner given a registered
name runs the trainable registered under it, in this kernel or ``raynb run`` process.

``tune.register_env`` names an RLlib environment in Ray; raynb serves no RLlib, so it
raises an error saying so instead of storing a creator nothing would call.
"""

from __future__ import annotations

from typing import Callable

_TRAINABLES: dict[str, Callable] = {}


def register_trainable(name: str, trainable, warn: bool = True) -> None:
    """Register ``trainable`` (a function or Trainable class) under ``name``.

    Raises:
        TypeError: ``name`` is not a string, or ``trainable`` is not callable.
    """
    if not isinstance(name, str) or not name:
        raise TypeError(f"register_trainable(name={name!r}): give a non-empty string")
    if not callable(trainable):
        raise TypeError(f"register_trainable({name!r}, ...): the trainable must be a function or class")
    _TRAINABLES[name] = trainable


def get_trainable(name: str):
    """The trainable registered under ``name``.

    Raises:
        ValueError: nothing is registered under ``name`` (naming the registered ones).
    """
    try:
        return _TRAINABLES[name]
    except KeyError:
        raise ValueError(
            f"no trainable is registered under {name!r} (registered: {sorted(_TRAINABLES)}); "
            "call tune.register_trainable(name, trainable) first, or pass the function itself"
        ) from None


def resolve(trainable):
    """A registered name resolved to its trainable; anything else as given."""
    return get_trainable(trainable) if isinstance(trainable, str) else trainable


def register_env(name: str, env_creator) -> None:
    """Ray registers an RLlib environment here; raynb has no RLlib.

    Raises:
        NotImplementedError: always, saying so.
    """
    raise NotImplementedError(
        f"tune.register_env({name!r}, ...): environments are for RLlib, which raynb does not "
        "serve; build the environment inside your training function instead"
    )

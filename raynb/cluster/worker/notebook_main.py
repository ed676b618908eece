"""The notebook's classes and functions, findable as ``__main__.<name>`` on a worker.

cloudpickle ships what the notebook defined (its ``__main__``) by value. Rebuilt
on a worker, such a class still says ``__module__ == "__main__"``, but the
worker's ``__main__`` (the zygote's module) has no attribute of that name, so
plain pickle, which saves a class by reference, failed: ``torch.save(Net(), path)``
raised ``PicklingError: Can't pickle <class '__main__.Net'>``. Loading the
payload records the notebook objects cloudpickle rebuilt, and for the length of
the run ``sys.modules["__main__"]`` is a fresh module holding them: a model saved
in a checkpoint then loads in the notebook, whose ``__main__`` defines the same
names. Each run gets its own module, so nothing of one run is seen by the next.
"""
from __future__ import annotations

import io
import pickle
import sys
import types
from contextlib import contextmanager

# cloudpickle's reconstructors of a class, an enum and a function shipped by value.
_BUILDERS = frozenset({"_make_skeleton_class", "_make_skeleton_enum", "_make_function"})

STATE_DICT_HINT = ("pickling an object pickles its class and every attribute; to save a model, "
                   "save model.state_dict() (torch.save(model.state_dict(), path)) and load it "
                   "into a model built the same way")


class _BufferReader(io.RawIOBase):
    """A read-only file over a buffer (a received frame, a reassembled bytearray), so the
    payload is unpickled from it without first being copied whole into a bytes object."""

    def __init__(self, data):
        self._view = memoryview(data).cast("B") if not isinstance(data, bytes) else memoryview(data)
        self._pos = 0

    def readable(self) -> bool:
        return True

    def readinto(self, b) -> int:
        n = min(len(b), len(self._view) - self._pos)
        b[:n] = self._view[self._pos:self._pos + n]
        self._pos += n
        return n

    def readline(self, size=-1) -> bytes:
        end = len(self._view) if size is None or size < 0 else min(len(self._view), self._pos + size)
        i = self._pos
        while i < end and self._view[i] != 10:
            i += 1
        line = bytes(self._view[self._pos:min(end, i + 1)])
        self._pos += len(line)
        return line

    def close(self) -> None:
        self._view.release()
        super().close()


class _RecordingUnpickler(pickle.Unpickler):
    """An Unpickler that remembers every class and function cloudpickle rebuilt."""

    def __init__(self, data):
        super().__init__(io.BytesIO(data) if isinstance(data, bytes) else io.BufferedReader(_BufferReader(data)))
        self.built: list = []

    def find_class(self, module: str, name: str):
        obj = super().find_class(module, name)
        if module.split(".")[0] != "cloudpickle" or name not in _BUILDERS:
            return obj
        built = self.built

        def build(*args, **kwargs):
            made = obj(*args, **kwargs)
            built.append(made)
            return made

        return build


def load_payload(data) -> tuple[object, dict]:
    """``cloudpickle.loads(data)``, and the notebook's classes and functions in it.

    ``data``: bytes, or any buffer (a zmq frame's, a bytearray), read in place.

    Returns:
        (the object, {name: class or function}) for each top-level ``__main__``
        definition that was shipped by value (named by its ``__qualname__``, the
        name pickle looks up).
    """
    unpickler = _RecordingUnpickler(data)
    obj = unpickler.load()
    shipped = {}
    for made in unpickler.built:
        qualname = getattr(made, "__qualname__", "")
        if getattr(made, "__module__", None) == "__main__" and qualname.isidentifier():
            shipped[qualname] = made
    return obj, shipped


@contextmanager
def notebook_main(shipped: dict):
    """``sys.modules["__main__"]`` is a fresh module holding ``shipped`` while inside."""
    module = types.ModuleType("__main__", "the notebook's definitions shipped with this run")
    module.__dict__.update(shipped)
    previous = sys.modules.get("__main__")
    sys.modules["__main__"] = module
    try:
        yield module
    finally:
        if previous is not None:
            sys.modules["__main__"] = previous
        else:
            sys.modules.pop("__main__", None)


def with_pickling_hint(exc: BaseException, message: str) -> str:
    """``message``, plus what to do instead, when ``exc`` is a pickling failure."""
    if isinstance(exc, pickle.PicklingError) or (
            isinstance(exc, (TypeError, AttributeError)) and "pickle" in message.lower()):
        return f"{message} ({STATE_DICT_HINT})"
    return message

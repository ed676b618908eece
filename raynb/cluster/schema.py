"""The field types of a message, checked before any handler sees it.

A signed message comes from a key holder, but a key holder's bug (or a tool of
theirs) can still send ``max_workers="x"``: stored, it crashed the head's tick 10 s
later. ``protocol.SCHEMAS`` gives each message type a :class:`Record`; a message
whose content does not match is rejected and counted like a bad signature.

A spec is a type (``int`` and ``float`` never accept a bool; ``float`` accepts an
int), a tuple of specs (any of them; ``None`` in it allows None), :class:`Int`,
:class:`ListOf`, :class:`MapOf` or a nested :class:`Record`. Fields not named in a
record are allowed (and ignored by the handlers).
"""
from __future__ import annotations


class Int:
    """An int (not a bool) in ``[low, high]``."""

    def __init__(self, low: int | None = None, high: int | None = None):
        self.low, self.high = low, high

    def problem(self, value, where: str) -> str | None:
        if not isinstance(value, int) or isinstance(value, bool):
            return f"{where} is {_name(value)}, not an integer"
        if (self.low is not None and value < self.low) or (self.high is not None and value > self.high):
            return f"{where} is {value}, out of [{self.low}, {self.high}]"
        return None

    def __str__(self) -> str:
        return "an integer"


class ListOf:
    def __init__(self, item):
        self.item = item

    def problem(self, value, where: str) -> str | None:
        if not isinstance(value, list):
            return f"{where} is {_name(value)}, not a list"
        for i, v in enumerate(value):
            found = problem(v, self.item, f"{where}[{i}]")
            if found:
                return found
        return None

    def __str__(self) -> str:
        return "a list"


class MapOf:
    """A dict with str keys whose values all match one spec."""

    def __init__(self, value):
        self.value = value

    def problem(self, value, where: str) -> str | None:
        if not isinstance(value, dict):
            return f"{where} is {_name(value)}, not a dict"
        for k, v in value.items():
            found = (f"{where} has a key {k!r} that is not a string" if not isinstance(k, str)
                     else problem(v, self.value, f"{where}[{k!r}]"))
            if found:
                return found
        return None

    def __str__(self) -> str:
        return "a dict"


class Record:
    """A dict with named fields: ``{"name": spec}`` required, ``{"name?": spec}`` optional."""

    def __init__(self, fields: dict | None = None):
        self.fields = {k.rstrip("?"): (spec, not k.endswith("?")) for k, spec in (fields or {}).items()}

    def problem(self, value, where: str = "content") -> str | None:
        if not isinstance(value, dict):
            return f"{where} is {_name(value)}, not a dict"
        for name, (spec, required) in self.fields.items():
            if name not in value:
                if required:
                    return f"{where} has no {name!r}"
                continue
            found = problem(value[name], spec, f"{where}[{name!r}]")
            if found:
                return found
        return None

    def __str__(self) -> str:
        return "a dict"


def problem(value, spec, where: str) -> str | None:
    """What is wrong with ``value`` as ``spec`` (None: nothing), naming where it is."""
    if isinstance(spec, tuple):
        if value is None and None in spec:
            return None
        others = [s for s in spec if s is not None]
        if len(others) == 1:  # (Record, None): say what is wrong inside it
            return problem(value, others[0], where)
        if any(problem(value, s, where) is None for s in others):
            return None
        return f"{where} is {_name(value)}, not {' or '.join(_describe(s) for s in spec)}"
    if isinstance(spec, (Int, ListOf, MapOf, Record)):
        return spec.problem(value, where)
    if spec is float:
        ok = isinstance(value, (int, float)) and not isinstance(value, bool)
    elif spec is int:
        ok = isinstance(value, int) and not isinstance(value, bool)
    else:
        ok = isinstance(value, spec)
    return None if ok else f"{where} is {_name(value)}, not {_describe(spec)}"


def _describe(spec) -> str:
    if spec is None:
        return "None"
    if isinstance(spec, type):
        return {float: "a number", int: "an integer", str: "a string", bool: "a bool",
                dict: "a dict", list: "a list"}.get(spec, spec.__name__)
    return str(spec)


def _name(value) -> str:
    text = repr(value)
    return f"{type(value).__name__} {text[:40] + '...' if len(text) > 40 else text}"

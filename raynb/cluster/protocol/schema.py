"""The field types of a message, checked before any handler sees it.

A signed message comes from a key holder, but a key holder's bug (or a tool of
theirs) can still send ``max_workers="x"``: stored, it crashed the head's tick 10 s
later. ``protocol.SCHEMAS`` gives each message type a :class:`Record`; a message
whose content does not match is rejected and counted like a bad signature.

A spec is a type (``int`` and ``float`` never accept a bool; ``float`` accepts an
int), a tuple of specs (any of them; ``None`` in it allows None), :class:`Int`,
:class:`ListOf`, :class:`MapOf` or a nested :class:`Record`. Fields not named in a
record are allowed (and ignored by the handlers).

Every message is checked, so the check is made in two steps: :func:`valid_for`, a
predicate built once per spec, answers for a well-formed message in about a
microsecond; only a malformed one is walked again by :func:`problem` to name what is
wrong. Both read the same specs, so they agree. A record's predicate is one Python
function generated for it (as ``dataclasses`` and ``attrs`` generate ``__init__``): each
field's test inlined, where a closure per field cost a call each (and messages are
checked in every process on a run's path).
"""

from __future__ import annotations

import itertools


class Int:
    """An int (not a bool) in ``[low, high]``."""

    def __init__(self, low: int | None = None, high: int | None = None):
        self.low, self.high = low, high

    def compile(self):
        low, high = self.low, self.high
        if low is None and high is None:
            return _is_int
        low = float("-inf") if low is None else low
        high = float("inf") if high is None else high
        return lambda v: _is_int(v) and low <= v <= high

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

    def compile(self):
        item = valid_for(self.item)
        return lambda v: isinstance(v, list) and all(map(item, v))

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

    def compile(self):
        item = valid_for(self.value)
        return lambda v: isinstance(v, dict) and all(isinstance(k, str) and item(x) for k, x in v.items())

    def problem(self, value, where: str) -> str | None:
        if not isinstance(value, dict):
            return f"{where} is {_name(value)}, not a dict"
        for k, v in value.items():
            found = (
                f"{where} has a key {k!r} that is not a string"
                if not isinstance(k, str)
                else problem(v, self.value, f"{where}[{k!r}]")
            )
            if found:
                return found
        return None

    def __str__(self) -> str:
        return "a dict"


class Record:
    """A dict with named fields: ``{"name": spec}`` required, ``{"name?": spec}`` optional."""

    def __init__(self, fields: dict | None = None):
        self.fields = {k.rstrip("?"): (spec, not k.endswith("?")) for k, spec in (fields or {}).items()}
        self._valid = None

    def compile(self):
        """The predicate, generated: ``def check(v)`` testing each field in turn."""
        names = {"_MISSING": _MISSING, "_is_int": _is_int, "_is_number": _is_number}
        lines = [
            "def check(v):",
            "    if v.__class__ is not dict and not isinstance(v, dict):",
            "        return False",
            "    get = v.get",
        ]
        for name, (spec, required) in self.fields.items():
            test = _inline(spec, "x", names)
            lines.append(f"    x = get({name!r}, _MISSING)")
            lines.append(
                f"    if x is _MISSING or not ({test}):"
                if required
                else f"    if x is not _MISSING and not ({test}):"
            )
            lines.append("        return False")
        lines.append("    return True")
        exec("\n".join(lines), names)  # noqa: S102 - the source is built above from the spec, no input
        return names["check"]

    def problem(self, value, where: str = "content") -> str | None:
        """What is wrong with ``value`` (None: nothing), naming the field: a valid value is
        answered by the compiled predicate, without building any text."""
        if self._valid is None:
            self._valid = self.compile()
        if self._valid(value):
            return None
        return self.describe_problem(value, where)

    def describe_problem(self, value, where: str = "content") -> str | None:
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


_MISSING = object()


def _is_int(v) -> bool:
    return v.__class__ is int or (isinstance(v, int) and not isinstance(v, bool))


def _is_number(v) -> bool:
    return v.__class__ is float or _is_int(v) or isinstance(v, float)


_ids = itertools.count()


def _inline(spec, x: str, names: dict) -> str:
    """A Python expression true exactly when ``valid_for(spec)(x)`` is; what it needs
    besides builtins goes into ``names``."""
    if isinstance(spec, tuple):
        nullable = None in spec
        parts = [_inline(s, x, names) for s in spec if s is not None]
        return " or ".join([f"{x} is None"] * nullable + [f"({p})" for p in parts]) or "False"
    if spec is int:
        return f"{x}.__class__ is int or _is_int({x})"
    if spec is float:
        return f"{x}.__class__ is float or _is_number({x})"
    if spec is object:
        return "True"
    if isinstance(spec, Int) and (spec.low is not None or spec.high is not None):
        bounds = " and ".join(
            ([f"{spec.low!r} <= {x}"] if spec.low is not None else [])
            + ([f"{x} <= {spec.high!r}"] if spec.high is not None else [])
        )
        return f"({x}.__class__ is int or _is_int({x})) and {bounds}"
    if isinstance(spec, Int):
        return _inline(int, x, names)
    name = f"_s{next(_ids)}"
    if isinstance(spec, type):
        names[name] = spec
        return f"isinstance({x}, {name})"
    names[name] = valid_for(spec)  # ListOf, MapOf, a nested Record: its own predicate
    return f"{name}({x})"


def valid_for(spec):
    """The predicate ``value -> bool`` for ``spec``: True exactly when :func:`problem` finds
    nothing."""
    if isinstance(spec, tuple):
        nullable = None in spec
        checks = [valid_for(s) for s in spec if s is not None]
        if len(checks) == 1:  # (X, None), the common case
            ok = checks[0]
            return (lambda v: v is None or ok(v)) if nullable else ok
        return lambda v: (v is None and nullable) or any(ok(v) for ok in checks)
    if isinstance(spec, (Int, ListOf, MapOf, Record)):
        return spec.compile()
    if spec is float:
        return _is_number
    if spec is int:
        return _is_int
    return lambda v: isinstance(v, spec)


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
    if isinstance(spec, Record):
        return spec.describe_problem(value, where)
    if isinstance(spec, (Int, ListOf, MapOf)):
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
        return {
            float: "a number",
            int: "an integer",
            str: "a string",
            bool: "a bool",
            dict: "a dict",
            list: "a list",
        }.get(spec, spec.__name__)
    return str(spec)


def _name(value) -> str:
    text = repr(value)
    return f"{type(value).__name__} {text[:40] + '...' if len(text) > 40 else text}"

"""Ray arguments that mean nothing on raynb: accepted, with one line saying so per process.

raynb keeps Ray's names so a Ray script runs with its imports changed; an argument that
has no effect here (``reuse_actors``: raynb's workers are always warm) must not make the
script fail, nor be dropped silently. An argument raynb cannot honour is an error instead,
raised where it is given.
"""

from __future__ import annotations

import sys

_said: set[str] = set()


def accepted_no_effect(name: str, why: str) -> None:
    """Say once per process that ``name`` is accepted and has no effect, and ``why``
    (written to stderr, where Ray writes its own notices)."""
    if name in _said:
        return
    _said.add(name)
    sys.stderr.write(f"raynb: {name} is accepted and has no effect here: {why}\n")
    sys.stderr.flush()


def given(value, default=None) -> bool:
    """Whether an optional argument was given something other than its default."""
    return value is not default and value != default

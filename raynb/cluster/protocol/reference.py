"""The protocol reference page (``docs/protocol.md``), written from the one declaration of
every message type (``catalog``): ``python -m raynb.cluster.protocol.reference --markdown``.
``test_docs_site.py`` fails when the page is stale."""

from __future__ import annotations

import sys

from . import catalog
from .declaration import MessageType
from .schema import Int, ListOf, MapOf, Record

_HEADER = """# Protocol reference

Generated from `raynb/cluster/protocol/catalog.py`
(`python -m raynb.cluster.protocol.reference --markdown > docs/protocol.md`).

Protocol version **{version}**. A message on the wire is a list of ZeroMQ frames
`[signature, header, content, *buffers]`: the header is JSON (version, message type, id,
session, sequence number, time), the content a pickle of plain values, the buffers opaque
bytes (user code and data). The signature is an HMAC-SHA256 with the cluster key over every
other frame, checked before anything is unpickled; a peer whose major version differs is
refused. A message's content is checked against its fields below before any handler sees
it: a required field missing, or a field of another type, and the message is dropped and
counted as a forged one is. Fields not listed are allowed and ignored; a field marked
*not checked* is one senders put and receivers read without a check.

Each process dispatches what it receives through one handler table: the head's in
`raynb/cluster/head/handlers.py`, a node agent's and a worker's beside their loops
(`raynb/cluster/node/agent.py`, `raynb/cluster/worker/task_loop.py`). A *reply* is read by
the request that waits for it instead.
"""


def type_name(spec) -> str:
    """A ``schema`` spec in words, for a table cell (no ``|``)."""
    if isinstance(spec, tuple):
        return " or ".join(type_name(s) for s in spec)
    if spec is None:
        return "None"
    if spec is object:
        return "any"
    if isinstance(spec, Int):
        if spec.low is None and spec.high is None:
            return "int"
        if spec.high is None:
            return f"int ≥ {spec.low}"
        return f"int in [{spec.low}, {spec.high}]"
    if isinstance(spec, ListOf):
        return f"list of {type_name(spec.item)}"
    if isinstance(spec, MapOf):
        return f"dict of str to {type_name(spec.value)}"
    if isinstance(spec, Record):
        if not spec.fields:
            return "dict"
        return (
            "{" + ", ".join(n + ("" if required else "?") for n, (_, required) in spec.fields.items()) + "}"
        )
    return spec.__name__


def _message(m: MessageType) -> list[str]:
    routes = ", ".join(str(r) for r in m.routes) if len(m.routes) < 6 else "any process -> any other"
    out = [f"### `{m.name}`", "", m.doc, "", f"- **sent**: {routes}", f"- **since**: {m.since}"]
    if m.buffers:
        out.append(f"- **buffers**: {m.buffers}")
    if not m.checked:
        out.append("- **content**: not checked on receipt")
    out += [f"- **changed in {v}**: {text}" for v, text in m.changes]
    out.append("")
    if m.fields:
        out += ["| field | type | required | meaning |", "| --- | --- | --- | --- |"]
        for f in m.fields:
            required = "yes" if f.required else ("no" if f.checked and m.checked else "no, not checked")
            since = f" (since {f.since})" if f.since else ""
            out.append(f"| `{f.name}` | {type_name(f.spec)} | {required} | {f.doc}{since} |")
        out.append("")
    else:
        out += ["No fields.", ""]
    return out


def markdown() -> str:
    """The protocol reference page (``docs/protocol.md``)."""
    out = [_HEADER.format(version=catalog.PROTOCOL_VERSION), "## Versions", ""]
    out += [f"- **{v}**: {text}" for v, text in catalog.VERSIONS]
    topics = list(dict.fromkeys(m.topic for m in catalog.MESSAGES))
    for topic in topics:
        out += ["", f"## {topic}", ""]
        for m in catalog.MESSAGES:
            if m.topic == topic:
                out += _message(m)
    return "\n".join(out).replace("``", "`").rstrip("\n") + "\n"


if __name__ == "__main__":  # pragma: no cover - a docs generator
    if sys.argv[1:] == ["--markdown"]:
        print(markdown(), end="")
    else:
        print("usage: python -m raynb.cluster.protocol.reference --markdown", file=sys.stderr)
        sys.exit(2)

"""The form of a message type's one declaration (``catalog``), and what is derived from it:
the constants (``messages.TASK_EVENT`` ...), ``MESSAGE_TYPES``, the validation ``SCHEMAS``,
which messages each process receives (its handler table is tested against it) and the
docs' protocol reference (``reference``).

A :class:`Field`'s ``spec`` is a ``schema`` spec; a field declared ``checked=False`` is
documented but not validated on receipt (a sender's extra, which a receiver reads with
``.get``): validation stays exactly what ``SCHEMAS`` checked before the fields were written
down. A message declared ``checked=False`` gets no ``SCHEMAS`` entry (any dict passes).
"""

from __future__ import annotations

from dataclasses import dataclass

from .schema import Record

# The processes that send and receive messages.
CLIENT, HEAD, NODE, WORKER = "client", "head", "node", "worker"
ROLES = (CLIENT, HEAD, NODE, WORKER)


@dataclass(frozen=True)
class Field:
    """One field of a message's content.

    Attributes:
        name: the key in the content dict.
        spec: its ``schema`` spec (a type, a tuple of them, ``Int``, ``ListOf`` ...).
        doc: one line: what it means.
        required: a message without it is refused (when ``checked``).
        checked: validated on receipt; False: documented only.
        since: the protocol version that added it, where later than its message's.
    """

    name: str
    spec: object
    doc: str
    required: bool = True
    checked: bool = True
    since: str | None = None


def req(name: str, spec, doc: str, since: str | None = None) -> Field:
    """A required, checked field."""
    return Field(name, spec, doc, since=since)


def opt(name: str, spec, doc: str, since: str | None = None) -> Field:
    """An optional, checked field (its type is checked when present)."""
    return Field(name, spec, doc, required=False, since=since)


def doc_only(name: str, spec, doc: str, since: str | None = None) -> Field:
    """A field senders put and receivers read, not checked on receipt."""
    return Field(name, spec, doc, required=False, checked=False, since=since)


@dataclass(frozen=True)
class Route:
    """Who sends a message to whom; ``reply``: the receiver reads it where it waits for
    the answer to its own request (``control.request``), not through its handler table;
    ``socket``: ``"data"`` for a node agent's data socket (``node/data_server``)."""

    sender: str
    receiver: str
    reply: bool = False
    socket: str = "control"

    def __str__(self) -> str:
        extra = [
            w for w, on in (("reply", self.reply), (f"{self.socket} socket", self.socket != "control")) if on
        ]
        return f"{self.sender} -> {self.receiver}" + (f" ({', '.join(extra)})" if extra else "")


def route(text: str, reply: bool = False, socket: str = "control") -> tuple[Route, ...]:
    """``"client->head"`` (or ``"client,node->head"``, ``"any->any"``) as routes."""
    senders, receivers = (part.strip().split(",") for part in text.split("->"))
    expand = lambda names: ROLES if names == ["any"] else tuple(n.strip() for n in names)  # noqa: E731
    for name in (*expand(senders), *expand(receivers)):
        if name not in ROLES:
            raise ValueError(f"unknown role {name!r} in route {text!r}: one of {', '.join(ROLES)}")
    return tuple(Route(s, r, reply, socket) for s in expand(senders) for r in expand(receivers) if s != r)


@dataclass(frozen=True)
class MessageType:
    """One message type, declared once.

    Attributes:
        constant: its Python name (``messages.<constant>``), e.g. ``"TASK_EVENT"``.
        name: its name on the wire (the header's ``msg_type``), e.g. ``"task_event"``.
        routes: who sends it to whom (:class:`Route`).
        doc: one line: what it says.
        since: the protocol version it appeared in.
        fields: its content's fields, in the order they are checked.
        buffers: what its buffer frames hold ("" for none).
        topic: the reference page's section.
        checked: whether its content is validated on receipt (a ``SCHEMAS`` entry).
        changes: ``(version, what changed)`` notes for the reference.
        dispatched: False for a type taken apart before any handler sees it: ``chunk``
            (the ``Session`` joins the pieces), ``run_events`` (a client's connection hands
            out its ``run_event`` messages, ``event_batch.expand``); no handler table has it.
    """

    constant: str
    name: str
    routes: tuple[Route, ...]
    doc: str
    since: str
    fields: tuple[Field, ...] = ()
    buffers: str = ""
    topic: str = ""
    checked: bool = True
    changes: tuple[tuple[str, str], ...] = ()
    dispatched: bool = True

    def record(self) -> Record:
        """The ``schema.Record`` its content is checked against: its checked fields."""
        return Record({f.name + ("" if f.required else "?"): f.spec for f in self.fields if f.checked})

    def receivers(self, dispatched: bool = True) -> set[str]:
        """The roles that receive it; ``dispatched``: only through a handler table
        (not as a reply read where its request waits)."""
        if dispatched and not self.dispatched:
            return set()
        return {r.receiver for r in self.routes if not (dispatched and r.reply)}


def message(constant: str, routes, doc: str, since: str, *fields: Field, **extra) -> MessageType:
    """A :class:`MessageType`, its wire name the constant in lower case."""
    return MessageType(constant, constant.lower(), tuple(routes), doc, since, tuple(fields), **extra)


def constants(messages) -> dict[str, str]:
    """``{"TASK_EVENT": "task_event", ...}``.

    Raises:
        ValueError: two declarations of one constant or wire name.
    """
    out: dict[str, str] = {}
    for m in messages:
        if m.constant in out or m.name in out.values():
            raise ValueError(f"message {m.constant} ({m.name!r}) is declared twice; declare it once")
        out[m.constant] = m.name
    return out


def schemas(messages) -> dict[str, Record]:
    """``{wire name: Record}`` of every checked message type."""
    return {m.name: m.record() for m in messages if m.checked}


def received_by(messages, role: str, dispatched: bool = True) -> set[str]:
    """The wire names of the messages ``role`` receives (``dispatched``: those its handler
    table must answer; replies read by a waiting request are left out)."""
    return {m.name for m in messages if role in m.receivers(dispatched)}

"""Bulk data from the notebook to the ranks: once per node, through shared memory.

While a run's payload is pickled (``build_submission``), a :class:`Scope` is active for
its *data key* (the run id, or a Tune experiment's id so that every trial shares one
copy). Datasets (``raynb.data``) and captured numpy arrays / torch tensors of at least
``RAYNB_SHM_THRESHOLD_BYTES`` (16 MiB by default) are then registered as blocks, and only
a small :class:`~raynb.cluster.node.shm.SharedBlock` goes into the payload; the spec names the
blocks (``shared_data``). Once the head has placed an attempt's ranks it asks this client
for the nodes of the placement that lack them (``data_needed``, ``head/data_gate.py``),
and they are written then, once into a shared-memory segment (``cluster.shm``) per such
node agent, named after its owner: a node that runs no rank gets no copy, and one that
joins later (a restart's replacement) gets one when ranks land there. A cluster of one
node agent on this host (the local cluster) is written to while pickling, and the spec
says so (``shared_data["written"]``): no round trip. The bytes never
pass through the head: to an agent that sees the client's own ``/dev/shm`` (the same
``shm.shm_id``) the client writes it itself (0600); to any other agent (another host, or
another ``/dev/shm`` on this one) it sends them to that agent's data socket (``cluster.data_server``:
signed, chunked, a credit window). The node agent owns and removes the segment (when the
head says the run ended, or on ``release_data`` for an experiment), and ranks map it
copy-on-write. ``RAYNB_DATA_VIA_SOCKET=1`` sends to local agents through their socket too.
"""

from __future__ import annotations

import importlib
import os
import socket
import sys
import uuid
from contextlib import contextmanager

from ..cluster.node import shm
from ..cluster.protocol import messages

DEFAULT_THRESHOLD = 16 << 20


def threshold_bytes() -> int:
    """Captured arrays and tensors of at least this many bytes go through shared memory
    (``$RAYNB_SHM_THRESHOLD_BYTES``, 16 MiB by default; 0 turns the path off)."""
    try:
        return int(os.environ.get("RAYNB_SHM_THRESHOLD_BYTES", DEFAULT_THRESHOLD))
    except ValueError:
        return DEFAULT_THRESHOLD


class Scope:
    """The shared-memory data of one data key, as this client placed it.

    Pickling a payload only registers its blocks (:meth:`place`); their bytes are written
    when the head, having placed an attempt's ranks, names the nodes that lack them
    (``data_needed``, :func:`on_data_needed`).

    Attributes:
        key (str): the run id or experiment id the segments are freed with.
        placed (dict): token -> SharedBlock, so one object is registered once per key.
        blocks (dict): block id -> (arrays, layout, nbytes, what): the bytes to write.
        used (list): the block ids of the payload being pickled (``shared_data`` of its spec).
    """

    def __init__(self, key: str):
        self.key = shm.check_key(key)
        self.placed: dict = {}
        self.blocks: dict = {}
        self.used: list = []
        self.prewritten: dict = {}  # (node id, agent pid) -> block ids written at pickling
        self._keep: dict = {}  # token -> the object (its id stays unique while placed)
        self._nodes = None  # [(node_id, agent pid, data socket address or None, its Curve key)]
        self._local: list = []  # segment names written through this process's /dev/shm
        self._written: set = set()  # segment names written (two trials placed at once ask alike)
        self.remote = False  # something was sent to a node agent's data socket

    def nodes(self) -> list[tuple]:
        """Every node agent: (node id, pid, None on this host else its data socket, that
        socket's Curve public key or None)."""
        if self._nodes is None:
            from .connection import get_client

            mine, via_socket = shm.shm_id(), os.environ.get("RAYNB_DATA_VIA_SOCKET") == "1"
            self._nodes = []
            for n in get_client().status().get("nodes", []):
                here = not via_socket and _same_shm(n, mine)
                if here or n.get("data_port"):
                    self._nodes.append(
                        (
                            n["node_id"],
                            n["pid"],
                            None if here else f"tcp://{n['ip']}:{n['data_port']}",
                            n.get("data_key"),
                        )
                    )
            if not self._nodes:
                raise RuntimeError(
                    "no raynb node agent can take in-memory data (none has joined the "
                    "cluster yet?); write the data to files every node can read and "
                    "use raynb.data.read_parquet()"
                )
        return self._nodes

    def place(self, token, obj, arrays: dict, what: str) -> shm.SharedBlock:
        """The block that will hold ``arrays`` on each node that runs ranks (registered on
        first use; written on ``data_needed``).

        Raises:
            shm.SharedMemoryFull: this host's ``/dev/shm`` lacks the room (a MemoryError naming
                ``/dev/shm``, the free and needed bytes and the fixes).
            RuntimeError: no node agent can take in-memory data.
        """
        block = self.placed.get(token)
        if block is None:
            layout, nbytes = shm.layout_of(arrays)
            nodes = self.nodes()
            shm.check_room(nbytes * min(1, sum(addr is None for _, _, addr, _ in nodes)), what)
            block = shm.SharedBlock(self.key, uuid.uuid4().hex[:16], layout, nbytes)
            self.blocks[block.block_id] = (arrays, layout, nbytes, what)
            if len(nodes) == 1 and nodes[0][2] is None:
                # One node, on this host: every rank runs there, so it is written now and the
                # head is told (``shared_data["written"]``): no data_needed round trip.
                node_id, pid = nodes[0][0], nodes[0][1]
                self.write({"node_id": node_id, "pid": pid, "blocks": [block.block_id]}, here=True)
                self.prewritten.setdefault((node_id, pid), []).append(block.block_id)
            self.placed[token], self._keep[token] = block, obj
        if block.block_id not in self.used:
            self.used.append(block.block_id)
        return block

    def written(self) -> list[dict]:
        """``shared_data["written"]``: the blocks of this payload written while pickling."""
        return [
            {"node_id": n, "pid": pid, "blocks": [b for b in ids if b in self.used]}
            for (n, pid), ids in self.prewritten.items()
            if any(b in self.used for b in ids)
        ]

    def write(self, node: dict, here: bool | None = None) -> None:
        """Write the blocks ``node`` (a ``data_needed`` entry) lacks: through this process's
        ``/dev/shm`` when the agent sees it, else to its data socket.

        Raises:
            KeyError: a block this scope never placed. MemoryError / OSError / TimeoutError:
            the write failed (``shm.write_segment``, ``data_server.send_segment``).
        """
        if here is None:
            here = os.environ.get("RAYNB_DATA_VIA_SOCKET") != "1" and _same_shm(node, shm.shm_id())
        if not here and not node.get("data_port"):
            raise OSError("the node agent does not share this notebook's /dev/shm and has no data socket")
        for block_id in node["blocks"]:
            arrays, layout, nbytes, what = self.blocks[block_id]
            name = shm.block_segment(node["node_id"], node["pid"], self.key, block_id)
            if name in self._written:
                continue
            if here:
                shm.check_room(nbytes, what)
                shm.write_segment(name, arrays, layout, nbytes, what)
                self._local.append(name)
            else:
                self.remote = True
                _send(
                    f"tcp://{node['ip']}:{node['data_port']}",
                    node.get("data_key"),
                    name,
                    arrays,
                    layout,
                    nbytes,
                )
            self._written.add(name)

    def discard(self) -> int:
        """Unlink what this scope wrote here (idempotent with the node agents' own removal)."""
        freed = sum(shm.remove(n) for n in self._local)
        self._local.clear()
        self._written.clear()
        self.prewritten.clear()
        self.placed.clear()
        self.blocks.clear()
        self._keep.clear()
        return freed


def on_data_needed(client, msg) -> None:
    """The head placed an attempt of a run whose payload holds shared-memory data: write
    the segments its nodes lack, then answer ``data_ready`` (or ``data_failed`` naming the
    node and the error; the head fails the run with it). In the client's handler table
    (``handlers.py``)."""
    c = msg.content
    reply = {"run_id": c["run_id"], "attempt": c["attempt"]}
    scope = _scopes.get(c["key"])
    for node in c["nodes"]:
        try:
            if scope is None:
                raise KeyError(
                    f"this notebook no longer holds the data of {c['key']} (its run ended, or "
                    "the kernel restarted)"
                )
            scope.write(node)
        except Exception as e:  # noqa: BLE001 - the run fails with it, the notebook goes on
            client.send(
                messages.DATA_FAILED,
                {
                    **reply,
                    "message": (
                        f"the run's in-memory data could not be written to node {node['node_id']} "
                        f"({node['ip']}): {type(e).__name__}: {e}"
                    ),
                },
            )
            return
    client.send(messages.DATA_READY, reply)


def _send(address: str, server_key: str | None, name: str, arrays: dict, layout: dict, nbytes: int) -> None:
    import zmq

    from ..cluster.node.data_server import send_segment
    from .connection import get_client

    client = get_client()
    send_segment(
        zmq.Context.instance(),
        client.session.key,
        address,
        name,
        arrays,
        layout,
        nbytes,
        curve_keys=client.info.get("curve"),
        server_key=server_key,
    )


def _same_shm(node: dict, mine: str) -> bool:
    """Whether node agent ``node`` (a ``status()`` or ``data_needed`` entry) sees this process's ``/dev/shm``:
    their ``shm.shm_id`` match; for an agent that did not report one, the same hostname
    and its pid alive here."""
    if node.get("shm_id") and mine:
        return node["shm_id"] == mine
    return node.get("hostname") == socket.gethostname() and _pid_alive(node.get("pid"))


def _pid_alive(pid) -> bool:
    try:
        os.kill(int(pid), 0)
        return True
    except PermissionError:
        return True
    except (OSError, TypeError, ValueError):
        return False


_scopes: dict[str, Scope] = {}
_active: list[Scope] = []


@contextmanager
def active(key: str):
    """Make ``key``'s scope current while a payload is pickled (kept after, for reuse)."""
    scope = _scopes.get(key) or _scopes.setdefault(key, Scope(key))
    scope.used = []
    _active.append(scope)
    try:
        yield scope
    finally:
        _active.pop()


def current() -> Scope | None:
    """The scope being pickled for, or None outside ``build_submission``."""
    return _active[-1] if _active else None


def forget(key: str) -> None:
    """The run of ``key`` ended: drop the client's references and unlink its segments
    here too (the node agents remove them as well; whichever comes first)."""
    scope = _scopes.pop(key, None)
    if scope is not None:
        scope.discard()
        if scope.remote:  # on other hosts only their agents can remove them
            _send_release(key)


def release(key: str) -> None:
    """An experiment (or a run) of ``key`` is done: unlink here and ask every node agent
    to remove its segments of ``key`` (``release_data``)."""
    forget(key)
    _send_release(key)


def _send_release(key: str) -> None:
    try:
        from .connection import get_client

        get_client().send(messages.RELEASE_DATA, {"key": key})
    except Exception:  # noqa: BLE001 - no head: its nodes removed everything when it stopped
        pass


def loaded_module(name: str):
    """The module ``name`` if it is imported, else None, without importing it.

    A module another thread is importing at this moment (a callback's thread importing
    torch, say) is in ``sys.modules`` half made, without its classes yet: this waits for
    that import to end (importlib's per-module lock, which the importing thread holds)
    and returns the whole module, or None if that import failed.
    """
    mod = sys.modules.get(name)
    if mod is None or not getattr(getattr(mod, "__spec__", None), "_initializing", False):
        return mod
    try:
        importlib.import_module(name)  # blocks on the module's import lock until it is done
    except ImportError:
        return None
    return sys.modules.get(name)


def reduce_large(obj):
    """The pickle reduction of a large numpy array or torch tensor into shared memory
    (``cluster.shm.attach_array`` / ``attach_tensor``), or None to pickle it as usual:
    no scope is active, it is below the threshold, or of a kind not handled (object
    dtype, a tensor subclass such as ``nn.Parameter``, not on the CPU, no numpy dtype)."""
    scope = current()
    limit = threshold_bytes()
    if scope is None or limit <= 0:
        return None
    np = loaded_module("numpy")
    if np is not None and type(obj) is np.ndarray:
        if obj.nbytes < limit or obj.dtype.hasobject:
            return None
        block = scope.place(("array", id(obj)), obj, {"a": obj}, f"a captured array {obj.shape} {obj.dtype}")
        return shm.attach_array, (block, "a")
    torch = loaded_module("torch")
    if torch is not None and type(obj) is torch.Tensor:
        if obj.device.type != "cpu" or obj.layout != torch.strided or obj.is_sparse:
            return None
        if obj.element_size() * obj.nelement() < limit:
            return None
        try:
            arr = obj.detach().numpy()
        except (TypeError, RuntimeError):  # bfloat16 and others numpy has no dtype for
            return None
        block = scope.place(
            ("tensor", id(obj)), obj, {"t": arr}, f"a captured tensor {tuple(obj.shape)} {obj.dtype}"
        )
        return shm.attach_tensor, (block, "t", bool(obj.requires_grad))
    return None

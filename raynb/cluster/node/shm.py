"""Shared-memory segments: a node's one copy of a dataset or a large captured value.

A segment is a file in ``/dev/shm`` (POSIX shared memory, tmpfs) named

    ``raynb-<node id>-<agent pid>-<key>-<random>``

where the node agent ``<node id>`` (process ``<agent pid>``) owns it and ``<key>`` is
the run id (or a Tune experiment's id) it serves. The notebook's client creates it
private (0600, ``O_EXCL``) and writes the bytes once: itself on its own host, through
the agent's data socket (``data_server``) on another; the owning agent
removes it when the head says the key is done (``free_data``: the run ended, was
cancelled, failed; the experiment ended), when it stops, and a new agent removes the
segments of agents whose pid is gone (SIGKILLed), as it does their rendezvous files.

Ranks map a segment with ``mmap`` (``MAP_PRIVATE``: pages are the segment's, shared by
every rank of the node, until a rank writes one, which then gets its own copy; no
rank can change another's data, and no write faults). ``multiprocessing.shared_memory``
is not used: on Python 3.11 its resource tracker unlinks or warns about segments that
a process merely attached to.
"""
from __future__ import annotations

import mmap
import os
import re
import uuid

import psutil

SHM_DIR = "/dev/shm"
PREFIX = "raynb-"
ALIGN = 64  # each column starts on a cache line (and any dtype's alignment)
KEY_RE = re.compile(r"^[A-Za-z0-9_]{1,64}$")
_NAME_RE = re.compile(r"^raynb-(?P<node>.+)-(?P<pid>\d+)-(?P<key>[A-Za-z0-9_]+)-(?P<random>[0-9a-f]+)$")


def check_key(key: str) -> str:
    """``key`` if it is safe in a file name (letters, digits, ``_``), else ValueError."""
    if not isinstance(key, str) or not KEY_RE.match(key):
        raise ValueError(f"bad shared-memory key {key!r}: use 1-64 letters, digits or '_'")
    return key


def segment_name(node_id: str, agent_pid: int, key: str) -> str:
    """A fresh segment name for ``key`` owned by the agent ``node_id`` (pid ``agent_pid``)."""
    return f"{PREFIX}{node_id}-{int(agent_pid)}-{check_key(key)}-{uuid.uuid4().hex[:12]}"


def shm_id() -> str:
    """Which ``/dev/shm`` this process sees: ``<boot id>:<st_dev>`` (the kernel's boot id,
    ``/proc/sys/kernel/random/boot_id``, and the device number of the tmpfs mounted there).
    Two processes can share segments exactly when their ids are equal: a hostname and a
    live pid are not enough (cloned machines share hostnames, a container or a network
    namespace can have a ``/dev/shm`` of its own, and a remote agent's pid may be alive here
    by chance). "" when either cannot be read."""
    try:
        with open("/proc/sys/kernel/random/boot_id") as f:
            boot = f.read().strip()
        return f"{boot}:{os.stat(SHM_DIR).st_dev}"
    except OSError:
        return ""


def free_bytes() -> int:
    """Bytes free in ``/dev/shm`` for this user (``statvfs``)."""
    st = os.statvfs(SHM_DIR)
    return st.f_bavail * st.f_frsize


class SharedMemoryFull(MemoryError):
    """``/dev/shm`` has no room for a segment: before it is written (the check), or while
    it is (another process filled it first). The message names ``/dev/shm``, the free and
    needed bytes and the fixes.

    Attributes:
        needed (int): bytes the segment needs.
        free (int): bytes free in ``/dev/shm`` when it was refused.
    """

    def __init__(self, what: str, needed: int, free: int, during_write: bool = False):
        self.needed, self.free = int(needed), int(free)
        when = " (it filled up while the segment was written)" if during_write else ""
        super().__init__(
            f"{what} needs {needed} bytes ({needed / 2**20:.1f} MiB) of shared memory in {SHM_DIR} on "
            f"this node, but {SHM_DIR} has {free} bytes ({free / 2**20:.1f} MiB) free{when}. Fixes: use "
            f"a file dataset (write the data to parquet and use raynb.data.read_parquet(path): each "
            f"rank reads its part in bounded memory, nothing goes to {SHM_DIR}); or give {SHM_DIR} "
            f"more room (`mount -o remount,size=16G {SHM_DIR}`; in Docker `docker run --shm-size=16g`; "
            f"in Kubernetes an emptyDir with medium: Memory mounted at {SHM_DIR}); or hold fewer copies "
            "at once (each run or Tune experiment keeps its own copy until it ends: let the others "
            "end, and pass an array once, through datasets=, not also as a captured variable).")


def room_margin() -> int:
    """Bytes of ``/dev/shm`` kept free: 64 MiB, or a sixteenth of a smaller ``/dev/shm``
    (Docker's default is 64 MiB: a fixed 64 MiB margin would refuse every byte there)."""
    st = os.statvfs(SHM_DIR)
    return min(64 << 20, st.f_blocks * st.f_frsize // 16)


def check_room(needed: int, what: str) -> None:
    """Raise :class:`SharedMemoryFull` when ``/dev/shm`` has no room for ``needed`` more
    bytes and :func:`room_margin`."""
    free = free_bytes()
    if needed + room_margin() > free:
        raise SharedMemoryFull(what, needed, free)


def layout_of(arrays: dict) -> tuple[dict, int]:
    """({column: (offset, dtype str, shape)}, total bytes) for C-contiguous packing."""
    layout, off = {}, 0
    for name, a in arrays.items():
        off = (off + ALIGN - 1) // ALIGN * ALIGN
        layout[name] = (off, a.dtype.str, tuple(a.shape))
        off += a.nbytes
    return layout, max(off, 1)


def write_segment(name: str, arrays: dict, layout: dict, nbytes: int, what: str = "a shared-memory segment") -> None:
    """Create segment ``name`` (0600, must not exist) holding ``arrays`` at ``layout``.
    Its pages are allocated first (``posix_fallocate``: a full ``/dev/shm`` is an error
    here, never a SIGBUS in a rank that reads a hole later), then one copy of each array's
    bytes (``pwrite`` from its buffer). On any error the partial segment is removed.

    Raises:
        SharedMemoryFull: ``/dev/shm`` has no room for ``nbytes`` (``what`` names the data).
        OSError: another failure to create or write the file.
    """
    import errno

    import numpy as np

    path = os.path.join(SHM_DIR, name)
    fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_EXCL, 0o600)
    try:
        os.ftruncate(fd, nbytes)
        os.posix_fallocate(fd, 0, nbytes)
        for col, (off, _, _) in layout.items():
            a = np.ascontiguousarray(arrays[col])
            view = memoryview(a.reshape(-1).view(np.uint8)) if a.size else memoryview(b"")
            done = 0
            while done < len(view):
                done += os.pwrite(fd, view[done:done + (1 << 30)], off + done)
    except BaseException as e:
        os.close(fd)
        remove(name)
        if isinstance(e, OSError) and e.errno == errno.ENOSPC:
            raise SharedMemoryFull(what, nbytes, free_bytes(), during_write=True) from None
        raise
    os.close(fd)


def map_segment(name: str) -> mmap.mmap:
    """Map segment ``name`` copy-on-write (``MAP_PRIVATE``). FileNotFoundError names it."""
    try:
        fd = os.open(os.path.join(SHM_DIR, name), os.O_RDONLY)
    except FileNotFoundError:
        raise FileNotFoundError(
            f"shared-memory segment {SHM_DIR}/{name} is gone: its run or experiment ended (or its "
            "node agent was restarted); submit the data again") from None
    try:
        size = os.fstat(fd).st_size
        return mmap.mmap(fd, size, flags=mmap.MAP_PRIVATE, prot=mmap.PROT_READ | mmap.PROT_WRITE)
    finally:
        os.close(fd)


def arrays_from(mm: mmap.mmap, layout: dict, writeable: bool = False) -> dict:
    """numpy views of ``layout``'s columns in the mapping ``mm`` (no copy); read-only
    unless ``writeable`` (a write then copies only that page, for this process)."""
    import numpy as np

    out = {}
    for col, (off, dtype, shape) in layout.items():
        dt = np.dtype(dtype)
        count = 1
        for s in shape:
            count *= s
        a = np.frombuffer(mm, dtype=dt, count=count, offset=off).reshape(shape)
        a.flags.writeable = writeable
        out[col] = a
    return out


def remove(name: str) -> int:
    """Unlink one segment; its size in bytes (0 when it was already gone)."""
    path = os.path.join(SHM_DIR, name)
    try:
        size = os.stat(path).st_size
        os.unlink(path)
        return size
    except FileNotFoundError:
        return 0


def segments(node_id: str | None = None, agent_pid: int | None = None, key: str | None = None) -> dict:
    """{segment name: size in bytes} of raynb's segments, filtered by owner and key."""
    out = {}
    try:
        names = os.listdir(SHM_DIR)
    except OSError:
        return out
    for name in names:
        m = _NAME_RE.match(name)
        if m is None or (node_id is not None and m["node"] != node_id) or (
                agent_pid is not None and int(m["pid"]) != agent_pid) or (key is not None and m["key"] != key):
            continue
        try:
            out[name] = os.stat(os.path.join(SHM_DIR, name)).st_size
        except OSError:
            pass
    return out


def free_key(node_id: str, agent_pid: int, key: str) -> int:
    """Remove the agent's segments for ``key``; bytes freed. A bad key frees nothing."""
    if not isinstance(key, str) or not KEY_RE.match(key):
        return 0
    return sum(remove(n) for n in segments(node_id, agent_pid, key))


def free_agent(node_id: str, agent_pid: int) -> int:
    """Remove every segment the agent owns (it is stopping); bytes freed."""
    return sum(remove(n) for n in segments(node_id, agent_pid))


def remove_stale() -> int:
    """Remove this user's segments whose owning agent's pid is gone; bytes freed."""
    freed = 0
    for name in segments():
        pid = int(_NAME_RE.match(name)["pid"])
        try:
            mine = os.stat(os.path.join(SHM_DIR, name)).st_uid == os.getuid()
        except OSError:
            continue
        if mine and not psutil.pid_exists(pid):
            freed += remove(name)
    return freed


class SharedBlock:
    """Columns (numpy arrays of equal first dimension or not) held once per node in shared
    memory: what travels to the ranks instead of the bytes. Small to pickle.

    The bytes reach a node only once the head has placed ranks there (``data_needed``,
    ``client.bulk``), so the block names no node: on a rank it is the segment
    ``raynb-<this node>-<its agent's pid>-<key>-<block_id>`` (:func:`block_segment`).

    Attributes:
        key (str): the run id or experiment id the segments are freed with.
        block_id (str): hex, the last part of every node's segment name.
        layout (dict): column -> (offset, dtype str, shape).
        nbytes (int): the segment's size in bytes.
    """

    def __init__(self, key: str, block_id: str, layout: dict, nbytes: int):
        self.key, self.block_id = check_key(key), str(block_id)
        self.layout, self.nbytes = dict(layout), int(nbytes)
        self._mm = None

    def __getstate__(self):
        return {"key": self.key, "block_id": self.block_id, "layout": self.layout, "nbytes": self.nbytes}

    def __setstate__(self, state):
        self.__init__(state["key"], state["block_id"], state["layout"], state["nbytes"])

    def segment(self, node_id: str) -> str | None:
        """This block's segment on node ``node_id`` (as its agent named it), or None."""
        tail = f"-{self.key}-{self.block_id}"
        return next((n for n in segments(node_id, key=self.key) if n.endswith(tail)), None)

    def arrays(self, writeable: bool = False) -> dict:
        """This node's columns as numpy views of the segment (mapped once per block).

        Raises:
            RuntimeError: this node holds no copy (the head did not ask the notebook for one).
            FileNotFoundError: the segment was freed.
        """
        if self._mm is None:
            node = os.environ.get("RAYNB_NODE_ID")
            name = self.segment(node) if node else None
            if name is None:
                raise RuntimeError(
                    f"in-memory data {self.key}/{self.block_id} is not in shared memory on this node "
                    f"({node}): its run or experiment ended, or the notebook did not write it here; "
                    "submit the run again, or put the data in files every node can read and use "
                    "raynb.data.read_parquet()")
            self._mm = map_segment(name)
        return arrays_from(self._mm, self.layout, writeable)


def block_segment(node_id: str, agent_pid: int, key: str, block_id: str) -> str:
    """The name of block ``block_id``'s segment of ``key`` on agent ``node_id`` (pid ``agent_pid``)."""
    if not re.fullmatch(r"[0-9a-f]{1,32}", str(block_id)):
        raise ValueError(f"bad shared-memory block id {block_id!r}: 1-32 hex digits")
    return f"{PREFIX}{node_id}-{int(agent_pid)}-{check_key(key)}-{block_id}"


def attach_array(block: SharedBlock, column: str):
    """Unpickling a large captured numpy array: a writeable copy-on-write view."""
    return block.arrays(writeable=True)[column]


def attach_tensor(block: SharedBlock, column: str, requires_grad: bool):
    """Unpickling a large captured torch tensor: ``torch.from_numpy`` of the view."""
    import torch

    t = torch.from_numpy(block.arrays(writeable=True)[column])
    return t.requires_grad_(True) if requires_grad else t

"""The head's side of streamed checkpoints (``cluster.ckpt_transfer``): pieces written
under the run's ``.staging``, digests checked, the rank's directory renamed into place;
and a committed checkpoint served piece by piece to a rank that resumes from it.

Every message is verified (HMAC, Curve off loopback) before it gets here, and must name
a run, attempt and rank that its worker holds now; a path is relative and stays inside
its directory (no ``..``, no symlink followed). A disk error is answered to the rank,
naming the path, and never reaches the head's loop.
"""

from __future__ import annotations

import hashlib
import logging
import os
import shutil
import time
from pathlib import Path

from ..protocol import messages
from ..storage.checkpoint_stream import PIECE_BYTES
from .offloop import Busy
from .run import Run

log = logging.getLogger("raynb.head")

STALE_S = 600.0  # an upload unfinished this long is dropped (its rank died, or its attempt ended)


def _safe(rel: str) -> bool:
    parts = Path(rel).parts
    return bool(parts) and not Path(rel).is_absolute() and ".." not in parts and "" not in parts


class Transfers:
    """Args:
    head: the :class:`~raynb.cluster.head.server.Head` (its runs, registry, send).
    """

    def __init__(self, head):
        self.head = head
        self._open: dict[str, dict] = {}  # transfer id -> {"dir", "hashes": {rel: sha256}, "sizes"}
        self.bytes_in = self.bytes_out = self.files_in = 0

    def _run_of(self, msg: messages.Message) -> Run | None:
        """The run, if the message's worker holds its rank in its current attempt."""
        c = msg.content
        run = self.head.runs.get(c["run_id"])
        if "rank" not in c or "worker_id" not in c:
            return None
        if run is None or run.state not in ("RUNNING", "FAILING", "CANCELLING"):
            return None
        rank = c["rank"]
        if (
            c.get("attempt", 0) != run.attempt
            or not (0 <= rank < len(run.ranks))
            or run.ranks[rank] != c["worker_id"]
        ):
            return None
        return run

    def _refuse(self, msg: messages.Message, text: str) -> None:
        self.head.send(msg.identity, messages.ERROR, {"message": text})

    # -- uploads ----------------------------------------------------------------
    def _stage(self, run: Run, c: dict) -> Path:
        return run.rundir.path / ".staging" / f"{c.get('attempt', 0)}_{c['report']}"

    def on_file(self, msg: messages.Message) -> None:
        c = msg.content
        run = self._run_of(msg)
        t = self._open.get(c["transfer"])
        if run is None or not _safe(c["path"]):
            if t is not None:
                t["bad"] = f"refused piece of {c['path']!r} (not this rank's run, or an unsafe path)"
            return
        if t is None:
            self._forget_stale()
            stage = self._stage(run, c)
            tmp = stage / f".tmp_rank_{c['rank']}_{c['transfer'][:8]}"
            t = self._open[c["transfer"]] = {"dir": tmp, "hashes": {}, "bad": None, "at": time.monotonic()}
            t["bad"] = _make_stage(run, stage, tmp)
        if t["bad"]:
            return
        h = t["hashes"].setdefault(c["path"], [hashlib.sha256(), 0])
        if c["offset"] != h[1]:
            t["bad"] = f"piece of {c['path']} at offset {c['offset']} out of order (expected {h[1]})"
            return
        piece = messages.buffer_bytes(msg.buffers[0]) if msg.buffers else b""
        path = t["dir"] / c["path"]
        try:
            if t.get("file") != c["path"]:  # the transfer's next file: one fd per file
                _close(t)
                path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
                t["fd"] = os.open(
                    path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600
                )
                t["file"] = c["path"]
            os.write(t["fd"], piece)
        except OSError as e:
            _close(t)
            t["bad"] = f"the head cannot write {path}: {e}"
            return
        h[0].update(piece)
        h[1] += len(piece)
        self.bytes_in += len(piece)

    def _forget_stale(self) -> None:
        """Uploads whose rank died midway: their fd closed, their half files removed."""
        now = time.monotonic()
        for tid, t in list(self._open.items()):
            if now - t["at"] > STALE_S:
                _close(self._open.pop(tid))
                shutil.rmtree(t["dir"], ignore_errors=True)

    def on_done(self, msg: messages.Message) -> None:
        c = msg.content
        t = self._open.pop(c["transfer"], None)
        if t is not None:
            _close(t)
        run = self._run_of(msg)
        if run is None:
            if t is not None:
                shutil.rmtree(t["dir"], ignore_errors=True)
            return self._refuse(
                msg, "checkpoint upload refused: this rank no longer holds its run (the attempt ended)"
            )
        if t is None:  # an empty checkpoint directory: nothing was sent
            stage = self._stage(run, c)
            t = {"dir": stage / f".tmp_rank_{c['rank']}_{c['transfer'][:8]}", "hashes": {}}
            t["bad"] = _make_stage(run, stage, t["dir"])
        got = {rel: h.hexdigest() for rel, (h, _) in t["hashes"].items()}
        if not t["bad"] and got != c["files"]:
            t["bad"] = (
                f"checkpoint files arrived incomplete or corrupted (SHA-256 of "
                f"{sorted(set(got.items()) ^ set(c['files'].items()))[:3]})"
            )
        final = t["dir"].parent / f"rank_{c['rank']}"
        if not t["bad"]:
            try:
                if final.exists():
                    shutil.rmtree(final)
                os.replace(t["dir"], final)
            except OSError as e:
                t["bad"] = f"the head cannot write {final}: {e}"
        if t["bad"]:
            shutil.rmtree(t["dir"], ignore_errors=True)
            log.warning("run %s: rank %d's checkpoint upload failed: %s", run.name, c["rank"], t["bad"])
            return self._refuse(msg, t["bad"])
        self.files_in += len(got)
        self.head.send(msg.identity, messages.CHECKPOINT_ACK, {"path": str(final)})

    # -- downloads --------------------------------------------------------------
    def _committed(self, msg: messages.Message) -> Path | None:
        """The checkpoint directory a fetch names, when its sender may read it: a rank of the
        run's current attempt, or a client (a key holder, which reads every run through
        the head) asking for a committed checkpoint of any run the head knows, live or
        archived. Always ``<the run's dir>/checkpoint_*``, an existing directory."""
        c = msg.content
        client = msg.identity.startswith(b"client:")
        run = self.head.store.find(None, c["run_id"]) if client else self._run_of(msg)
        root = Path(c["checkpoint"])
        if (
            run is None
            or root.parent != run.rundir.path
            or not root.name.startswith("checkpoint_")
            or (client and (root.is_symlink() or not root.is_dir()))
        ):
            return None
        return root

    def on_fetch(self, msg: messages.Message) -> None:
        c = msg.content
        root = self._committed(msg)
        if root is None:
            return self._refuse(
                msg,
                f"no checkpoint {c['checkpoint']} for run {c['run_id']} on this head "
                "(pruned, not committed, or not that run's)",
            )
        try:
            if "path" not in c:  # its files' sizes and digests: hashed off the loop (offloop)
                return self.head.offloop.submit(
                    lambda: _listing(root), lambda files, error: self._listed(msg, root, files, error)
                )
            if not _safe(c["path"]):
                return self._refuse(msg, f"unsafe checkpoint path {c['path']!r}")
            fd = os.open(root / c["path"], os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
            try:
                piece = os.pread(fd, PIECE_BYTES, int(c.get("offset") or 0))
            finally:
                os.close(fd)
        except (OSError, Busy) as e:
            return self._refuse(msg, f"the head cannot read checkpoint {root}: {e}")
        self.bytes_out += len(piece)
        self.head.send(msg.identity, messages.CHECKPOINT_PIECE, {"files": {}}, [piece])

    def _listed(
        self, msg: messages.Message, root: Path, files: dict | None, error: BaseException | None
    ) -> None:
        if error is not None:
            return self._refuse(msg, f"the head cannot read checkpoint {root}: {error}")
        self.head.send(msg.identity, messages.CHECKPOINT_PIECE, {"files": files})

    def status(self) -> dict:
        return {"bytes_in": self.bytes_in, "files_in": self.files_in, "bytes_out": self.bytes_out}


def _make_stage(run: Run, stage: Path, tmp: Path) -> str | None:
    """Make an upload's directories, each 0700; the refusal to send the rank, if any.

    Never the run directory itself: one removed while the run ran is not made again (with
    only the later checkpoints in it), as a rank on shared storage does not (``session``)."""
    if not run.rundir.path.is_dir():
        return (
            f"the run directory {run.rundir.path} is gone (removed while the run ran?), "
            "so the checkpoint cannot be saved"
        )
    try:
        stage.parent.mkdir(exist_ok=True, mode=0o700)
        stage.mkdir(exist_ok=True, mode=0o700)
        tmp.mkdir(mode=0o700)
    except OSError as e:
        return f"the head cannot write {tmp}: {e}"
    return None


def _close(t: dict) -> None:
    fd = t.pop("fd", None)
    t.pop("file", None)
    if fd is not None:
        os.close(fd)


def _listing(root: Path) -> dict:
    """(a worker thread) ``{relative path: (size, sha256)}`` of a checkpoint's files."""
    files = {}
    for d, _, names in os.walk(root):
        for n in names:
            p = Path(d) / n
            if p.is_symlink():
                continue  # never written by an upload; not served (O_NOFOLLOW)
            files[str(p.relative_to(root))] = (p.stat().st_size, _sha256(p))
    return files


def _sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()

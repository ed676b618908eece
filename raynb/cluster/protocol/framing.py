"""One multipart ZeroMQ message out or in, in the fewest Python steps.

pyzmq's ``send_multipart`` and ``recv_multipart`` (``zmq/sugar/socket.py``) call the
socket's Python-level ``send`` / ``recv`` for every frame, combine ``IntFlag`` enums
for each (``SNDMORE | flags``) and ask the socket for ``RCVMORE`` after each frame
received. raynb's messages have four to six frames and every re-run moves a dozen of
them through the head: the same calls made on the Cython socket directly, with plain
int flags and each received frame's own ``more`` bit, take a fraction of the time
(``benchmarks/report_cost.py`` measures the path).

Same semantics as pyzmq's: ``copy=False`` throughout, so a frame under the socket's
``copy_threshold`` is copied and a bigger one is sent zero-copy; received frames are
``zmq.Frame`` objects. Anything else than a pyzmq socket (a stand-in with its
methods), and any socket of pyzmq's cffi backend, is handed to its own
``send_multipart`` / ``recv_multipart``.
"""

from __future__ import annotations

import zmq
from zmq.backend import Socket as _Socket

_SNDMORE = int(zmq.SNDMORE)
_send, _recv = _Socket.send, _Socket.recv
# The Cython backend sets each received frame's ``more``; the cffi one (PyPy's) leaves it
# False, so there every socket takes pyzmq's own calls.
_FAST = _Socket.__module__.startswith("zmq.backend.cython")


def send_frames(sock: zmq.Socket, frames, flags: int = 0) -> None:
    """``sock.send_multipart(frames, flags, copy=False)``.

    Raises:
        zmq.ZMQError: as ``send_multipart`` does (``zmq.Again`` with ``zmq.NOBLOCK``
            and a full queue).
    """
    if not _FAST or not isinstance(sock, _Socket):  # a stand-in with pyzmq's interface (a test's recorder)
        return sock.send_multipart(frames, copy=False, **({"flags": flags} if flags else {}))
    flags = int(flags)
    last = len(frames) - 1
    for i, frame in enumerate(frames):
        _send(sock, frame, flags | _SNDMORE if i < last else flags, False)


def recv_frames(sock: zmq.Socket, flags: int = 0) -> list:
    """``sock.recv_multipart(flags, copy=False)``: the message's frames, as ``zmq.Frame``.

    Raises:
        zmq.Again: with ``zmq.NOBLOCK`` when no message is waiting.
        zmq.ZMQError: as ``recv_multipart`` does.
    """
    if not _FAST or not isinstance(sock, _Socket):
        return sock.recv_multipart(copy=False, **({"flags": flags} if flags else {}))
    frame = _recv(sock, int(flags), False)
    frames = [frame]
    while frame.more:  # the rest of a message arrives with its first frame
        frame = _recv(sock, 0, False)
        frames.append(frame)
    return frames

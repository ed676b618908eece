"""Checkpoints on the head's disk, read from a client that cannot see that disk (a
notebook on a laptop attached with ``raynb.connect("tcp://host:port", key_file=...)``).

``Checkpoint.as_directory()`` / ``to_directory()`` call :func:`download` when the
checkpoint came from a raynb head (its ``Result`` was built from the head's run record)
and its path is not readable here. The files come through the head, over a socket of
their own built from this process's connection (HMAC key; CurveZMQ keys off loopback),
with the protocol ranks use to resume from a streamed checkpoint
(``cluster.ckpt_transfer``: a file list with SHA-256 digests, then pieces).
"""
from __future__ import annotations

from ..cluster.storage.checkpoint_stream import download_for_client
from .connection import get_client


def download(run_id: str, checkpoint: str, dest: str) -> str:
    """Fetch the committed checkpoint directory ``checkpoint`` (a path on the head's disk)
    of run ``run_id`` into ``dest`` (created 0700 when missing); returns ``dest``.

    Raises:
        FileNotFoundError: this process is not connected to a raynb head
            (``raynb.connect(...)`` first).
        raynb.cluster.storage.checkpoint_stream.TransferError (an OSError): the head refused (the
            checkpoint was pruned, or is not that run's), did not answer, or a file
            arrived corrupted (SHA-256 mismatch).
    """
    client = get_client(connect_if_needed=False)
    if client is None or "key" not in client.info:
        raise FileNotFoundError(f"checkpoint {checkpoint} is on the raynb head's disk, not readable here, "
                                "and this process is not connected to that head: raynb.connect(...) "
                                "to it first, then read the checkpoint")
    return download_for_client(client.info, run_id, checkpoint, dest)

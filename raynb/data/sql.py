"""``read_sql``: the rows of a SQL query, through any DB-API 2 connection (``sqlite3``,
``psycopg``, ``pymysql``, ...), run once in this process when called, as Ray's
``read_sql`` with its default single read (``shard_keys`` not given)."""

from __future__ import annotations

from typing import Callable

from . import block
from .dataset import Dataset
from .sources import InMemorySource


def _fetch(sql: str, connection_factory: Callable) -> tuple[list, list]:
    """(column names, rows) of ``sql``; the connection is closed after."""
    conn = connection_factory()
    if not hasattr(conn, "cursor"):
        raise TypeError(
            f"read_sql: connection_factory() returned {type(conn).__name__}, not a DB-API connection; "
            "return one, e.g. lambda: sqlite3.connect(path)"
        )
    try:
        cursor = conn.cursor()
        try:
            cursor.execute(sql)
            if cursor.description is None:
                raise ValueError(f"read_sql({sql!r}): the statement returns no rows (it is not a query)")
            names = [d[0] for d in cursor.description]
            twice = sorted({n for n in names if names.count(n) > 1})
            if twice:  # one would overwrite the other's values
                raise ValueError(
                    f"read_sql({sql!r}): the query returns column(s) {twice} more than once; "
                    "give each a name of its own (SELECT a, a AS a2 ...)"
                )
            rows = []
            while True:
                part = cursor.fetchmany(10_000)
                if not part:
                    break
                rows += part
        finally:
            cursor.close()
    finally:
        conn.close()
    return names, rows


def read_sql(
    sql: str,
    connection_factory: Callable,
    *,
    shard_keys: list | None = None,
    shard_hash_fn: str = "MD5",
    parallelism: int = -1,
    override_num_blocks: int | None = None,
    **ray_args,
) -> Dataset:
    """A dataset of the rows ``sql`` returns (Ray's ``read_sql``): one column per
    selected column, named as the cursor names it.

    Args:
        sql (str): the query.
        connection_factory (() -> DB-API 2 connection): called once; the connection is
            closed after the rows are fetched.
        shard_keys: Ray's parallel read by hashed keys; raynb reads once, so it is refused.

    Raises:
        TypeError: ``connection_factory`` not callable, or returning no connection.
        NotImplementedError: ``shard_keys`` given.
        ValueError: a statement that returns no rows, or a query of no rows (named), or
            one returning a column name twice.
    """
    if not callable(connection_factory):
        raise TypeError("read_sql(sql, connection_factory): give a function returning a DB-API connection")
    if shard_keys:
        raise NotImplementedError(
            "read_sql(shard_keys=...): raynb runs the query once in this process; leave "
            "shard_keys out (each rank still reads only its rows of the result)"
        )
    names, rows = _fetch(sql, connection_factory)
    if not rows:
        cols = {n: block.object_column([]) for n in names}
    else:
        cols = {n: block.as_column([r[i] for r in rows]) for i, n in enumerate(names)}
    return Dataset(InMemorySource(block.columns_from(cols, "read_sql")))


__all__ = ["read_sql"]

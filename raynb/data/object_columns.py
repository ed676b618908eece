"""How an in-memory dataset's columns travel to the ranks.

- **Numeric columns** (numpy numbers, any per-row shape; numpy fixed-width strings) go
  into the node's shared-memory segment as they are: ranks map them read-only, zero copy.
- **Object columns** of strings, bytes, lists (ragged or not) and 1-d numpy arrays are
  encoded as one Arrow IPC stream each (``pyarrow``: strings and lists in Arrow's own
  layout) and that stream's bytes go into the same shared-memory segment, once per
  node; a rank decodes them back to Python values on first use.
- **Object columns Arrow cannot hold as they are** (dicts, mixed types, arbitrary
  objects: Arrow would turn dicts into structs and fill in missing keys) travel pickled
  in the run's signed payload, to each rank.

``encode`` decides per column; ``decode`` undoes it on the rank.
"""
from __future__ import annotations

ARROW, PICKLE = "arrow", "pickle"
_PREFIX = "__arrow__:"


def kind_of(a) -> str:
    """``"numeric"`` (shared memory as is), ``ARROW`` or ``PICKLE`` for a column."""
    if not a.dtype.hasobject:
        return "numeric"
    return ARROW if _arrow_element(a) is not None else PICKLE


def _arrow_element(a) -> str | None:
    """What every value of the object column ``a`` is, when Arrow holds it faithfully:
    ``"str"``, ``"bytes"``, ``"list"`` (of numbers or strings, nested), ``"ndarray"``
    (1-d numeric arrays), else None."""
    import numpy as np

    kinds = set()
    for v in a:
        if isinstance(v, str):
            kinds.add("str")
        elif isinstance(v, bytes):
            kinds.add("bytes")
        elif isinstance(v, list) and _plain_list(v):
            kinds.add("list")
        elif isinstance(v, np.ndarray) and v.ndim == 1 and v.dtype.kind in "biuf":
            kinds.add("ndarray")
        else:
            return None
        if len(kinds) > 1:
            return None
    return kinds.pop() if kinds else None


def _plain_list(v: list) -> bool:
    """A list of numbers (not bools mixed with them), strings, or such lists, one kind."""
    kinds = {type(x) for x in v}
    if len(kinds) > 1:
        return False
    if not kinds:
        return True
    k = kinds.pop()
    if k is list:
        return all(_plain_list(x) for x in v)
    return k in (int, float, str)


def encode(columns: dict) -> tuple[dict, dict, dict]:
    """Split columns for shipping.

    Returns:
        (arrays for shared memory: numeric columns and ``"__arrow__:<name>"`` uint8 Arrow
        streams, {name: element kind} of the Arrow ones, {name: object array} to pickle).
    """
    import numpy as np
    import pyarrow as pa

    shared, arrow, pickled = {}, {}, {}
    for name, a in columns.items():
        kind = "numeric" if not a.dtype.hasobject else _arrow_element(a)
        if kind == "numeric":
            shared[name] = a
            continue
        if kind is None:
            pickled[name] = a
            continue
        try:
            arr = pa.array(list(a))
        except (pa.ArrowInvalid, pa.ArrowTypeError, OverflowError):
            pickled[name] = a
            continue
        sink = pa.BufferOutputStream()
        table = pa.table({"v": arr})
        with pa.ipc.new_stream(sink, table.schema) as w:
            w.write_table(table)
        shared[_PREFIX + name] = np.frombuffer(sink.getvalue(), dtype=np.uint8)
        arrow[name] = kind
    return shared, arrow, pickled


def decode(arrays: dict, arrow: dict, pickled: dict, order: list) -> dict:
    """The columns in ``order`` from the shared arrays, Arrow streams and pickled ones."""
    import pyarrow as pa

    from .block import object_column

    out = {}
    for name in order:
        if name in pickled:
            out[name] = pickled[name]
        elif name in arrow:
            buf = pa.py_buffer(arrays[_PREFIX + name])
            col = pa.ipc.open_stream(buf).read_all().column("v")
            if arrow[name] == "ndarray":
                out[name] = object_column(list(col.to_numpy(zero_copy_only=False)))
            else:
                out[name] = object_column(col.to_pylist())
        else:
            out[name] = arrays[name]
    return out


def paths_of(columns: dict) -> dict:
    """{column: "shared memory" | "arrow" | "pickle"}: the path each column takes."""
    out = {}
    for name, a in columns.items():
        kind = kind_of(a)
        out[name] = "shared memory" if kind == "numeric" else kind
    return out

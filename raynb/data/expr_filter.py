"""``Dataset.filter(expr="...")``: Ray Data's string predicate (Python syntax over column
names: ``"id > 5"``, ``"a == 'x' and b <= 2.5"``, ``"c in [1, 2]"``), evaluated per batch
with pandas on the columns it names."""

from __future__ import annotations

import ast

from . import block


class ExprFilter:
    """A picklable batch function keeping the rows where ``expr`` holds.

    Raises:
        ValueError: ``expr`` is not a Python expression (the parse error named), or names
            a column the batch lacks (on the first batch).
        TypeError: ``expr`` is not a string (Ray's expression objects are not served).
    """

    def __init__(self, expr):
        if not isinstance(expr, str):
            raise TypeError(
                f'filter(expr={expr!r:.60}): raynb takes a string predicate such as "id > 5" '
                "(Ray's expression objects are not served); or pass a function of a row"
            )
        try:
            tree = ast.parse(expr, mode="eval")
        except SyntaxError as e:
            raise ValueError(f"filter(expr={expr!r}): not a Python expression ({e.msg})") from None
        self.expr = expr
        self.names = sorted({n.id for n in ast.walk(tree) if isinstance(n, ast.Name)})
        self.__name__ = f"filter(expr={expr!r})"

    def __call__(self, batch: dict) -> dict:
        import numpy as np
        import pandas as pd

        if not batch:
            return batch
        n = block.num_rows(batch)
        cols = {k: batch[k] for k in self.names if k in batch}
        missing = [k for k in self.names if k not in batch and k not in ("True", "False", "None")]
        if missing:
            raise ValueError(
                f"filter(expr={self.expr!r}): no column {missing} (the dataset has {list(batch)})"
            )
        mask = pd.DataFrame(cols, index=range(n)).eval(self.expr, engine="python") if cols else True
        mask = np.broadcast_to(np.asarray(mask, dtype=bool), (n,))
        return block.take_rows(batch, np.flatnonzero(mask))

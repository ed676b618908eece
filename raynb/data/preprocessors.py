"""Ray Data's common preprocessors (``ray.data.preprocessors``): ``StandardScaler``,
``MinMaxScaler``, ``LabelEncoder``, ``OneHotEncoder``, ``SimpleImputer`` and
``Concatenator``, with Ray's ``fit`` / ``transform`` / ``fit_transform`` /
``transform_batch``.

``fit`` reads the dataset once in this process for its statistics; ``transform`` adds a
lazy ``map_batches`` step, so it runs wherever the rows are read (each rank of a run).
"""

from __future__ import annotations


class PreprocessorNotFittedException(RuntimeError):
    """``transform`` before ``fit`` on a preprocessor that needs statistics."""


class Preprocessor:
    """Base: ``_fit(frame) -> stats`` (fittable ones) and ``_transform(batch) -> batch``
    on numpy batches (dict of column -> array)."""

    _is_fittable = True

    def __init__(self):
        self.stats_ = None

    def fit(self, ds) -> "Preprocessor":
        """Compute the statistics over every row of ``ds``; returns self."""
        if self._is_fittable:
            self.stats_ = self._fit(ds.to_pandas())
        return self

    def fit_transform(self, ds):
        """``fit(ds)``, then ``transform(ds)``."""
        return self.fit(ds).transform(ds)

    def _check_fitted(self) -> None:
        if self._is_fittable and self.stats_ is None:
            raise PreprocessorNotFittedException(
                f"{type(self).__name__} is not fitted: call fit(dataset) (or fit_transform) first"
            )

    def transform(self, ds):
        """``ds`` with this preprocessing as a lazy step.

        Raises:
            PreprocessorNotFittedException: a fittable preprocessor not fitted yet.
        """
        self._check_fitted()
        return ds.map_batches(self._transform, batch_format="numpy")

    def transform_batch(self, batch):
        """One batch (a dict of arrays or a pandas DataFrame) transformed, in its own kind."""
        import pandas as pd

        self._check_fitted()
        if isinstance(batch, pd.DataFrame):
            out = self._transform({c: batch[c].to_numpy() for c in batch.columns})
            return pd.DataFrame({k: list(v) if v.ndim > 1 else v for k, v in out.items()})
        return self._transform(dict(batch))

    def fit_status(self) -> str:
        """ "FITTED", "NOT_FITTED" or "NOT_FITTABLE", as Ray's."""
        if not self._is_fittable:
            return "NOT_FITTABLE"
        return "FITTED" if self.stats_ is not None else "NOT_FITTED"


def _outputs(columns, output_columns):
    if output_columns is not None and len(output_columns) != len(columns):
        raise ValueError(f"output_columns {output_columns} must name one column per input column {columns}")
    return list(output_columns or columns)


class _Scaler(Preprocessor):
    def __init__(self, columns: list, output_columns: list | None = None):
        super().__init__()
        self.columns, self.output_columns = list(columns), _outputs(columns, output_columns)

    def _transform(self, batch: dict) -> dict:
        import numpy as np

        for col, out in zip(self.columns, self.output_columns):
            shift, scale = self.stats_[col]
            batch[out] = (np.asarray(batch[col], dtype=np.float64) - shift) / scale
        return batch


class StandardScaler(_Scaler):
    """``(x - mean) / std`` per column (population std; a constant column: divided by 1)."""

    def _fit(self, df) -> dict:
        return {c: (df[c].mean(), df[c].std(ddof=0) or 1.0) for c in self.columns}


class MinMaxScaler(_Scaler):
    """``(x - min) / (max - min)`` per column (a constant column: divided by 1)."""

    def _fit(self, df) -> dict:
        return {c: (df[c].min(), (df[c].max() - df[c].min()) or 1.0) for c in self.columns}


class SimpleImputer(_Scaler):
    """Missing values filled with the column's ``"mean"``, ``"most_frequent"`` value, or
    ``fill_value`` (``strategy="constant"``).

    Raises:
        ValueError: an unknown strategy; "constant" without ``fill_value``.
    """

    def __init__(self, columns: list, strategy: str = "mean", fill_value=None, *, output_columns=None):
        if strategy not in ("mean", "most_frequent", "constant"):
            raise ValueError(
                f"SimpleImputer(strategy={strategy!r}): use 'mean', 'most_frequent' or 'constant'"
            )
        if strategy == "constant" and fill_value is None:
            raise ValueError("SimpleImputer(strategy='constant') needs fill_value")
        super().__init__(columns, output_columns)
        self.strategy, self.fill_value = strategy, fill_value
        self._is_fittable = strategy != "constant"

    def _fit(self, df) -> dict:
        if self.strategy == "mean":
            return {c: df[c].mean() for c in self.columns}
        return {c: df[c].mode().iloc[0] for c in self.columns}

    def _transform(self, batch: dict) -> dict:
        import pandas as pd

        for col, out in zip(self.columns, self.output_columns):
            fill = self.fill_value if self.strategy == "constant" else self.stats_[col]
            batch[out] = pd.Series(batch[col]).fillna(fill).to_numpy()
        return batch


class LabelEncoder(Preprocessor):
    """The label column's values as 0..k-1, in sorted order of the values seen by ``fit``."""

    def __init__(self, label_column: str, *, output_column: str | None = None):
        super().__init__()
        self.label_column, self.output_column = label_column, output_column or label_column

    def _fit(self, df) -> dict:
        return {v: i for i, v in enumerate(sorted(df[self.label_column].dropna().unique().tolist()))}

    def _transform(self, batch: dict) -> dict:
        import numpy as np

        batch[self.output_column] = np.array(
            [self.stats_.get(v, -1) for v in batch[self.label_column].tolist()]
        )
        return batch


class OneHotEncoder(Preprocessor):
    """Each column's value as a one-hot vector over the categories ``fit`` saw (sorted;
    an unseen value: all zeros), as Ray 2.60 encodes it (a vector column)."""

    def __init__(
        self, columns: list, *, max_categories: dict | None = None, output_columns: list | None = None
    ):
        super().__init__()
        self.columns, self.output_columns = list(columns), _outputs(columns, output_columns)
        self.max_categories = max_categories or {}

    def _fit(self, df) -> dict:
        out = {}
        for c in self.columns:
            counts = df[c].value_counts()
            top = counts.index.tolist()[: self.max_categories.get(c, len(counts))]
            out[c] = {v: i for i, v in enumerate(sorted(top))}
        return out

    def _transform(self, batch: dict) -> dict:
        import numpy as np

        for col, out in zip(self.columns, self.output_columns):
            cats = self.stats_[col]
            onehot = np.zeros((len(batch[col]), len(cats)), dtype=np.int64)
            for i, v in enumerate(batch[col].tolist()):
                if v in cats:
                    onehot[i, cats[v]] = 1
            batch[out] = onehot
        return batch


class Concatenator(Preprocessor):
    """``columns`` joined into one vector column ``output_column_name`` (the inputs
    dropped), of ``dtype`` when given.

    Raises:
        ValueError: (on transform) a missing column when ``raise_if_missing``.
    """

    _is_fittable = False

    def __init__(
        self,
        columns: list,
        output_column_name: str = "concat_out",
        dtype=None,
        raise_if_missing: bool = False,
        flatten: bool = False,
    ):
        super().__init__()
        self.columns, self.output_column_name = list(columns), output_column_name
        self.dtype, self.raise_if_missing, self.flatten = dtype, raise_if_missing, flatten

    def _transform(self, batch: dict) -> dict:
        import numpy as np

        missing = [c for c in self.columns if c not in batch]
        if missing and self.raise_if_missing:
            raise ValueError(f"Concatenator: missing columns {missing} (the batch has {list(batch)})")
        cols = [np.asarray(batch.pop(c)) for c in self.columns if c in batch]
        cols = [c.reshape(len(c), -1) for c in cols]
        out = np.concatenate(cols, axis=1) if cols else np.empty((0, 0))
        batch[self.output_column_name] = out.astype(self.dtype) if self.dtype is not None else out
        return batch

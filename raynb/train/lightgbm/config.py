"""``ray.train.lightgbm.LightGBMConfig`` and ``normalize_pandas_for_lightgbm`` on raynb.

Ray's ``LightGBMConfig`` has no fields: its backend gives each rank LightGBM's network
parameters (``get_network_params``), which raynb's ``LightGBMTrainer`` does from its own
rendezvous. ``normalize_pandas_for_lightgbm`` maps Arrow-backed pandas columns to the
NumPy-nullable dtypes LightGBM accepts, as Ray's.
"""

from __future__ import annotations

from dataclasses import dataclass

from ..backend_config import BackendConfig


@dataclass
class LightGBMConfig(BackendConfig):
    """LightGBM's data-parallel setup (Ray's ``LightGBMConfig``; no fields)."""

    @property
    def framework(self) -> str:
        return "lightgbm"


def check_lightgbm_config(config) -> None:
    """``LightGBMTrainer(lightgbm_config=...)``: None or a LightGBMConfig.

    Raises:
        TypeError: anything else."""
    if config is not None and not isinstance(config, LightGBMConfig):
        raise TypeError(
            "LightGBMTrainer(lightgbm_config=...) takes a raynb.train.lightgbm.LightGBMConfig, "
            f"got {type(config).__name__}"
        )


def normalize_pandas_for_lightgbm(df):
    """``df`` with its Arrow-backed integer, float and bool columns as pandas' NumPy-nullable
    dtypes (``Int64``, ``UInt8``, ``Float32``, ``boolean``, ...), which LightGBM's pandas
    input accepts; other columns (NumPy-backed, Arrow strings) are left as they are.

    Args:
        df (pandas.DataFrame): e.g. from ``Dataset.to_pandas()`` on Arrow data.

    Returns:
        pandas.DataFrame: ``df`` itself when nothing needed mapping.

    Raises:
        TypeError: ``df`` is not a pandas DataFrame.
    """
    import pandas as pd
    import pyarrow as pa

    if not isinstance(df, pd.DataFrame):
        raise TypeError(f"normalize_pandas_for_lightgbm takes a pandas DataFrame, got {type(df).__name__}")
    mapping = {}
    for column, dtype in df.dtypes.items():
        if not isinstance(dtype, pd.ArrowDtype):
            continue
        t = dtype.pyarrow_dtype
        if pa.types.is_signed_integer(t):
            mapping[column] = f"Int{t.bit_width}"
        elif pa.types.is_unsigned_integer(t):
            mapping[column] = f"UInt{t.bit_width}"
        elif pa.types.is_floating(t):
            mapping[column] = f"Float{t.bit_width}"
        elif pa.types.is_boolean(t):
            mapping[column] = "boolean"
    return df.astype(mapping) if mapping else df

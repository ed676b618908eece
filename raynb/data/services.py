"""Ray Data's readers and constructors that need a service or library raynb does not run
(Spark, Dask, Kafka, a table format's catalog, audio/video decoders, Ray's object store):
each is served as a function that raises ``NotImplementedError`` when called, naming
why and the nearest raynb path, so a script that imports it fails where it uses it."""

from __future__ import annotations

from typing import Callable

_PANDAS = "read it with that library into pandas / pyarrow and use raynb.data.from_pandas / from_arrow"
_NO_STORE = "raynb has no object store (no ray.put / ObjectRef): pass the objects themselves to raynb.data.{}"

# name -> (why raynb does not serve it, the nearest raynb path)
SERVICES: dict[str, tuple[str, str]] = {
    "from_spark": ("it needs a Spark session", "collect with df.toPandas() and use raynb.data.from_pandas"),
    "from_dask": ("it needs a Dask cluster", "compute with ddf.compute() and use raynb.data.from_pandas"),
    "from_modin": ("it needs Modin", "convert with df._to_pandas() and use raynb.data.from_pandas"),
    "from_mars": ("it needs a Mars cluster", "fetch to pandas and use raynb.data.from_pandas"),
    "from_daft": ("it needs Daft", "convert with df.to_arrow() and use raynb.data.from_arrow"),
    "from_numpy_refs": ("it takes Ray ObjectRefs", _NO_STORE.format("from_numpy")),
    "from_pandas_refs": ("it takes Ray ObjectRefs", _NO_STORE.format("from_pandas")),
    "from_arrow_refs": ("it takes Ray ObjectRefs", _NO_STORE.format("from_arrow")),
    "from_blocks": ("it takes Ray's internal blocks", "use raynb.data.from_arrow / from_pandas"),
    "read_kafka": ("it needs a Kafka client and brokers", _PANDAS),
    "read_snowflake": ("it needs a Snowflake connector", "use raynb.data.read_sql with its connection"),
    "read_bigquery": ("it needs Google BigQuery", _PANDAS),
    "read_clickhouse": ("it needs a ClickHouse server", "use raynb.data.read_sql with its DB-API driver"),
    "read_mongo": ("it needs MongoDB", _PANDAS),
    "read_databricks_tables": ("it needs Databricks", _PANDAS),
    "read_unity_catalog": ("it needs Unity Catalog", _PANDAS),
    "read_delta_sharing_tables": ("it needs a Delta Sharing server", _PANDAS),
    "read_delta": (
        "it needs the Delta Lake library",
        "write or read the table's parquet files: raynb.data.read_parquet",
    ),
    "read_iceberg": (
        "it needs an Iceberg catalog",
        "scan it with pyiceberg to arrow and use raynb.data.from_arrow",
    ),
    "read_hudi": ("it needs the Hudi library", _PANDAS),
    "read_lance": ("it needs the Lance library", "lance's to_table() and raynb.data.from_arrow"),
    "read_audio": (
        "it needs an audio decoder",
        "decode files with your library in map_batches over read_binary_files",
    ),
    "read_videos": (
        "it needs a video decoder",
        "decode files with your library in map_batches over read_binary_files",
    ),
    "read_avro": ("it needs an Avro library", _PANDAS),
    "read_mcap": ("it needs the MCAP library", _PANDAS),
    "read_lerobot": ("it needs the LeRobot library", _PANDAS),
    "read_zarr": ("it needs the Zarr library", "load arrays with zarr and use raynb.data.from_numpy"),
    "list_stats_summaries": (
        "Ray's execution statistics do not exist here",
        "use Dataset.count() / schema()",
    ),
}


def _refusal(name: str, why: str, instead: str) -> Callable:
    def refused(*args, **kwargs):
        raise NotImplementedError(f"raynb.data.{name}: not served, as {why}; {instead} (see docs/data.md)")

    refused.__name__ = refused.__qualname__ = name
    refused.__doc__ = (
        f"Ray's ``{name}``, not served by raynb ({why}): {instead}.\n\nRaises NotImplementedError."
    )
    return refused


REFUSALS: dict[str, Callable] = {name: _refusal(name, *hint) for name, hint in SERVICES.items()}

__all__ = ["REFUSALS", "SERVICES"]

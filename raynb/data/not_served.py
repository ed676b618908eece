"""Ray Data's names that raynb does not serve: using one raises an error that names it
and points at the *Coming from Ray* page, never a silent no-op."""

from __future__ import annotations

DOCS = "docs/coming-from-ray.md (and docs/data.md for what raynb's Dataset serves)"

# Ray 2.60's Dataset / DataIterator methods and ray.data functions without a raynb form.
NOT_SERVED = {
    "Dataset": {
        "context",
        "copy",
        "deserialize_lineage",
        "get_dataset_id",
        "get_internal_block_refs",
        "get_stats_summary",
        "has_serializable_lineage",
        "iter_internal_ref_bundles",
        "iter_jax_batches",
        "iter_tf_batches",
        "join",
        "mix",
        "name",
        "random_sample",
        "rename_columns",
        "serialize_lineage",
        "set_name",
        "streaming_train_test_split",
        "summary",
        "to_arrow_refs",
        "to_daft",
        "to_dask",
        "to_mars",
        "to_modin",
        "to_numpy_refs",
        "to_pandas_refs",
        "to_random_access_dataset",
        "to_spark",
        "with_column",
        "with_columns",
        "write_bigquery",
        "write_clickhouse",
        "write_delta",
        "write_iceberg",
        "write_images",
        "write_kafka",
        "write_lance",
        "write_mongo",
        "write_numpy",
        "write_snowflake",
        "write_sql",
        "write_tfrecords",
        "write_turbopuffer",
        "write_webdataset",
        "write_orc",
    },
    "DataIterator": {"get_context", "iter_jax_batches", "iter_tf_batches", "stats", "to_torch"},
    "ray.data": {  # the rest: services.REFUSALS (a function that says why when called)
        "Catalog",
        "CatalogAccessMode",
        "ClickHouseTableSettings",
        "DatabricksUnityCatalog",
        "DatasetSummary",
        "KafkaAuthConfig",
        "MixStoppingCondition",
        "RandomSeedConfig",
        "ReaderFormat",
        "ResolvedSource",
        "SinkMode",
    },
}


def not_served(owner: str, name: str) -> AttributeError:
    """The error for ``owner.name``: a Ray name raynb does not serve (named, with the docs
    page), or an ordinary AttributeError for any other missing name."""
    if name in NOT_SERVED.get(owner, ()):
        return AttributeError(
            f"{owner}.{name} is Ray Data's, and raynb does not serve it; see {DOCS}, or "
            "run this code on Ray (`raynb start --ray` shares a Ray cluster)"
        )
    where = "raynb.data" if owner == "ray.data" else f"raynb.data.{owner}"
    return AttributeError(f"{where} has no attribute {name!r}")

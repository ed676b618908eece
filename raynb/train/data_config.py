"""``DataConfig``: which of a trainer's datasets are split between the ranks (``ray.train.DataConfig``)."""

from __future__ import annotations

from ..client.no_effect import accepted_no_effect


class DataConfig:
    """Which datasets ``get_dataset_shard`` splits (``TorchTrainer(dataset_config=...)``).

    Args:
        datasets_to_split ("all" | list[str]): the names split into disjoint per-rank parts;
            every other dataset is read whole by each rank (as in Ray).
        execution_options, enable_shard_locality: Ray Data's; accepted with no effect (a
            shard is mapped from its node's shared copy, or its files read by that rank).

    Raises:
        TypeError: ``datasets_to_split`` neither "all" nor a list of names.
    """

    def __init__(self, datasets_to_split="all", execution_options=None, enable_shard_locality: bool = True):
        if datasets_to_split != "all" and not (
            isinstance(datasets_to_split, (list, tuple))
            and all(isinstance(n, str) for n in datasets_to_split)
        ):
            raise TypeError(
                f"DataConfig(datasets_to_split={datasets_to_split!r}): give 'all' or a list of dataset names"
            )
        if execution_options is not None:
            accepted_no_effect(
                "DataConfig(execution_options=...)",
                "shards are read from shared memory or "
                "by each rank from its files; there is no streaming executor to configure",
            )
        self.datasets_to_split = datasets_to_split if datasets_to_split == "all" else list(datasets_to_split)
        self.execution_options, self.enable_shard_locality = execution_options, enable_shard_locality

    @staticmethod
    def default_ingest_options():
        """Ray's default execution options for training ingest (``ExecutionOptions``, to
        change and pass as ``execution_options``; no effect here, as that argument)."""
        from ..data.context import ExecutionOptions

        return ExecutionOptions(locality_with_output=True, preserve_order=False)

    def unsplit(self, names) -> list[str]:
        """The names among ``names`` each rank reads whole."""
        return (
            [] if self.datasets_to_split == "all" else [n for n in names if n not in self.datasets_to_split]
        )

    def __repr__(self) -> str:
        return f"DataConfig(datasets_to_split={self.datasets_to_split!r})"

"""``prepare_trainer``: check a ``transformers.Trainer`` sees raynb's world, and let it read
raynb Data iterables (``ray.train.huggingface.transformers.prepare_trainer``)."""

from __future__ import annotations

from ... import session as _session
from ._compat import import_transformers

transformers = import_transformers()


def _is_plain_iterable(dataset) -> bool:
    """An iterable of ready batches (``iter_torch_batches()`` of a dataset shard), not a
    torch / datasets Dataset that the Trainer batches itself."""
    import torch.utils.data as tud

    return (
        dataset is not None
        and not isinstance(dataset, (tud.Dataset, dict, str))
        and not hasattr(dataset, "__getitem__")
        and hasattr(dataset, "__iter__")
    )


def _loader(iterable):
    from torch.utils.data import DataLoader, IterableDataset

    class BatchStream(IterableDataset):
        def __iter__(self):
            return iter(iterable)

    # batch_size=1 and unwrapping: each item is already a whole batch of this rank's shard.
    return DataLoader(BatchStream(), batch_size=1, collate_fn=lambda items: items[0])


def prepare_trainer(trainer):
    """Prepare a ``transformers.Trainer`` built inside a raynb training function.

    Checks that the Trainer's world (``args.world_size``, ``args.process_index``) is
    raynb's, and makes a ``train_dataset`` / ``eval_dataset`` that is an iterable of
    ready batches (e.g. ``get_dataset_shard("train").iter_torch_batches(batch_size=8)``)
    a loader the Trainer can read, already sharded by raynb (so the Trainer shards it no
    further).

    Args:
        trainer (transformers.Trainer): the Trainer.

    Returns:
        The same Trainer (its class swapped for a subclass that reads such iterables).

    Raises:
        RuntimeError: called outside a training function, or the Trainer's world differs
            from raynb's (its arguments were built before the run's variables were set).
    """
    task = _session._require("prepare_trainer")
    args = trainer.args
    if args.world_size != task["world_size"] or args.process_index != task["rank"]:
        raise RuntimeError(
            f"prepare_trainer(): the Trainer's world is rank {args.process_index} of "
            f"{args.world_size}, raynb's is rank {task['rank']} of {task['world_size']}: "
            "build TrainingArguments inside the training function"
        )
    base = type(trainer)
    if getattr(base, "_raynb_prepared", False):
        return trainer

    class RayTransformersTrainer(base):
        _raynb_prepared = True

        def get_train_dataloader(self):
            if _is_plain_iterable(self.train_dataset):
                return _loader(self.train_dataset)
            return super().get_train_dataloader()

        def get_eval_dataloader(self, eval_dataset=None):
            ds = self.eval_dataset if eval_dataset is None else eval_dataset
            if isinstance(ds, str) and isinstance(self.eval_dataset, dict):
                ds = self.eval_dataset[ds]
            if _is_plain_iterable(ds):
                return _loader(ds)
            return super().get_eval_dataloader(eval_dataset)

    RayTransformersTrainer.__name__ = RayTransformersTrainer.__qualname__ = f"Ray{base.__name__}"
    trainer.__class__ = RayTransformersTrainer
    return trainer

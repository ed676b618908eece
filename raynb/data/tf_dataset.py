"""``to_tf``: a dataset's (or a rank's shard's) batches as a ``tf.data.Dataset`` of
``(features, labels)``, as Ray Data's ``Dataset.to_tf`` / ``DataIterator.to_tf``.
TensorFlow is imported only when it is called."""

from __future__ import annotations


def _pick(batch: dict, columns):
    if columns is None:
        return None
    if isinstance(columns, str):
        return batch[columns]
    return {c: batch[c] for c in columns}


def _spec(tf, value):
    if isinstance(value, dict):
        return {k: _spec(tf, v) for k, v in value.items()}
    return tf.TensorSpec(shape=(None, *value.shape[1:]), dtype=tf.as_dtype(value.dtype))


def to_tf(
    source,
    feature_columns,
    label_columns=None,
    *,
    batch_size: int = 1,
    drop_last: bool = False,
    local_shuffle_buffer_size: int | None = None,
    local_shuffle_seed: int | None = None,
    prefetch_batches: int = 1,
    feature_type_spec=None,
    label_type_spec=None,
    **ignored,
):
    """``source``'s numpy batches (``source.iter_batches``) as a ``tf.data.Dataset`` of
    ``(features, labels)`` (``features`` alone when ``label_columns`` is None); a column name
    gives a tensor, a list of names a dict of tensors. Each iteration of the dataset reads
    ``source`` again (one epoch). Ray's ``additional_columns`` are not served.

    Raises:
        KeyError: a named column is not in the data.
        TypeError: ``additional_columns`` given.
    """
    import tensorflow as tf

    if ignored.get("additional_columns") is not None:
        raise TypeError("to_tf(additional_columns=...) is not served by raynb; put them in feature_columns")
    options = dict(
        batch_size=batch_size,
        batch_format="numpy",
        drop_last=drop_last,
        local_shuffle_buffer_size=local_shuffle_buffer_size,
        local_shuffle_seed=local_shuffle_seed,
        prefetch_batches=prefetch_batches,
    )

    def pairs():
        for batch in source.iter_batches(**options):
            features = _pick(batch, feature_columns)
            yield features if label_columns is None else (features, _pick(batch, label_columns))

    first = next(iter(source.iter_batches(**{**options, "prefetch_batches": 0})))
    features_spec = feature_type_spec or _spec(tf, _pick(first, feature_columns))
    if label_columns is None:
        signature = features_spec
    else:
        signature = (features_spec, label_type_spec or _spec(tf, _pick(first, label_columns)))
    return tf.data.Dataset.from_generator(pairs, output_signature=signature)

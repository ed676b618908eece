"""``read_tfrecords``: files of ``tf.train.Example`` records as rows, read without
TensorFlow (its ``Example`` messages are declared here for the ``protobuf`` package),
so reading never loads TensorFlow into the notebook or a rank beside torch.

A TFRecord file is a sequence of records, each ``uint64 length``, ``uint32 crc of
length``, ``length`` bytes, ``uint32 crc of data`` (little endian); the checksums are not
verified (as Ray's reader). Each feature becomes a column as in Ray: a one-value list
is that value, longer or empty lists are lists; bytes stay bytes, floats are float32."""

from __future__ import annotations

import functools
import struct

from . import block
from .dataset import Dataset
from .sources import InMemorySource

# The messages of tensorflow/core/example/{feature,example}.proto, declared for protobuf.


@functools.lru_cache(maxsize=1)
def example_class():
    """The ``tensorflow.Example`` message class, built from descriptors (no TensorFlow)."""
    from google.protobuf import descriptor_pb2, descriptor_pool, message_factory

    F = descriptor_pb2.FieldDescriptorProto
    f = descriptor_pb2.FileDescriptorProto(
        name="raynb_tf_example.proto", package="tensorflow", syntax="proto3"
    )

    def msg(name, *fields, **kw):
        m = f.message_type.add(name=name, **kw)
        for number, (fname, label, ftype, type_name, oneof) in enumerate(fields, 1):
            fd = m.field.add(name=fname, number=number, label=label, type=ftype)
            if type_name:
                fd.type_name = type_name
            if oneof:
                fd.oneof_index = 0
        return m

    rep, opt = F.LABEL_REPEATED, F.LABEL_OPTIONAL
    msg("BytesList", ("value", rep, F.TYPE_BYTES, None, False))
    msg("FloatList", ("value", rep, F.TYPE_FLOAT, None, False))
    msg("Int64List", ("value", rep, F.TYPE_INT64, None, False))
    kinds = [("bytes_list", "BytesList"), ("float_list", "FloatList"), ("int64_list", "Int64List")]
    feature = msg("Feature", *[(n, opt, F.TYPE_MESSAGE, f".tensorflow.{t}", True) for n, t in kinds])
    feature.oneof_decl.add(name="kind")
    features = msg("Features", ("feature", rep, F.TYPE_MESSAGE, ".tensorflow.Features.FeatureEntry", False))
    entry = features.nested_type.add(name="FeatureEntry")
    entry.options.map_entry = True
    entry.field.add(name="key", number=1, label=opt, type=F.TYPE_STRING)
    entry.field.add(name="value", number=2, label=opt, type=F.TYPE_MESSAGE, type_name=".tensorflow.Feature")
    msg("Example", ("features", opt, F.TYPE_MESSAGE, ".tensorflow.Features", False))
    pool = descriptor_pool.DescriptorPool()
    pool.Add(f)
    return message_factory.GetMessageClass(pool.FindMessageTypeByName("tensorflow.Example"))


def records(data: bytes, path: str):
    """The records of one TFRecord file's bytes.

    Raises:
        ValueError: the file ends inside a record (named).
    """
    pos, n = 0, len(data)
    while pos < n:
        if pos + 12 > n:
            raise ValueError(f"read_tfrecords: {path} ends inside a record header at byte {pos}")
        (length,) = struct.unpack_from("<Q", data, pos)
        start, end = pos + 12, pos + 12 + length
        if end + 4 > n:
            raise ValueError(f"read_tfrecords: {path} ends inside a record at byte {pos}")
        yield data[start:end]
        pos = end + 4


_KINDS = {"bytes_list": "binary", "float_list": "float32", "int64_list": "int64"}


def _columns(examples: list) -> dict:
    """Column name -> (arrow type name, values per row), a one-value list unwrapped."""
    cols: dict = {}
    for i, ex in enumerate(examples):
        for name, feat in ex.features.feature.items():
            kind = feat.WhichOneof("kind")
            values = list(getattr(feat, kind).value) if kind else []
            kinds, rows = cols.setdefault(name, (set(), [None] * len(examples)))
            if kind:
                kinds.add(_KINDS[kind])
            rows[i] = values
    return cols


def _arrow_table(examples: list):
    import pyarrow as pa

    arrays = {}
    for name, (kinds, rows) in _columns(examples).items():
        typ = getattr(pa, kinds.pop())() if len(kinds) == 1 else pa.null()
        if all(r is not None and len(r) == 1 for r in rows):
            arrays[name] = pa.array([r[0] for r in rows], type=typ)
        else:
            arrays[name] = pa.array(rows, type=pa.list_(typ))
    return pa.table(arrays)


def _parse(Example, rec: bytes, path: str, index: int):
    from google.protobuf.message import DecodeError

    try:
        return Example.FromString(rec)
    except DecodeError as e:
        raise ValueError(
            f"read_tfrecords: {path}: record {index} is not a tf.train.Example ({e}); the file is "
            "corrupt or holds another message (read it with read_binary_files)"
        ) from e


def read_tfrecords(
    paths, *, include_paths: bool = False, shuffle=None, file_extensions=None, **kw
) -> Dataset:
    """One row per ``tf.train.Example`` record of the TFRecord files ``paths`` (files,
    directories, globs, ``pyarrow.fs`` URIs), read in this process when called, as
    Ray's ``read_tfrecords`` (``shuffle``: a ``FileShuffleConfig`` orders the files).

    Raises:
        FileNotFoundError: a path that does not exist.
        NotImplementedError: ``tf_schema`` (a TensorFlow Metadata schema) given.
        ValueError: a record that is not a ``tf.train.Example`` (file and record named),
            a file that ends inside a record, or no records at all.
    """
    from .more_sources import _read_files

    if kw.get("tf_schema") is not None:
        raise NotImplementedError(
            "read_tfrecords(tf_schema=...): raynb infers each feature's type from the records; "
            "cast columns afterwards with map_batches"
        )
    Example = example_class()
    examples, where = [], []
    suffixes = tuple(f".{e.lstrip('.')}" for e in file_extensions or ())
    for f, data in _read_files(paths, "read_tfrecords", suffixes, shuffle):
        for i, rec in enumerate(records(data, f)):
            examples.append(_parse(Example, rec, f, i))
            where.append(f)
    if not examples:
        raise ValueError(f"read_tfrecords({paths!r}): the files hold no records")
    cols = block.table_to_numpy(_arrow_table(examples))
    if include_paths:
        cols["path"] = block.object_column(where)
    return Dataset(InMemorySource(block.columns_from(cols, "read_tfrecords")))


__all__ = ["read_tfrecords"]

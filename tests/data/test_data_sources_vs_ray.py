"""Custom sources and sinks, and the readers of other formats, against real ray.data
(Ray 2.60, in this process, one CPU): a user's ``Datasource`` / ``Datasink`` subclass
written as Ray's docs write them, and the same generated files, give the same rows.
Ray starts once for the module and is shut down after."""

from __future__ import annotations

import importlib
import io
import json
import os
import sqlite3
import struct
import tarfile

import numpy as np
import pyarrow as pa
import pytest
from support.ray_data_session import norm, ray_data_session

import raynb.data as rd


@pytest.fixture(scope="module")
def ray_data():
    pytest.importorskip("ray")
    with ray_data_session("rds.") as data:
        yield data


def sorted_rows(ds, key):
    return sorted(norm(ds.take_all()), key=lambda r: r[key])


def datasource_classes(data):
    """Ray's documented ``Datasource`` subclass, built on ``data`` (ray.data or raynb.data)."""
    from_block = importlib.import_module(f"{data.__name__}.block")

    class RangeSquaresDatasource(data.Datasource):
        def __init__(self, n: int):
            super().__init__()
            self.n = n

        def estimate_inmemory_data_size(self):
            return self.n * 16

        def get_read_tasks(self, parallelism, per_task_row_limit=None, data_context=None):
            bounds = [int(b) for b in np.linspace(0, self.n, parallelism + 1)]
            tasks = []
            for lo, hi in zip(bounds[:-1], bounds[1:]):
                ids = list(range(lo, hi))

                def read(ids=ids):
                    return [pa.table({"id": ids, "sq": [i * i for i in ids]})]

                meta = from_block.BlockMetadata(num_rows=hi - lo, size_bytes=16 * (hi - lo), exec_stats=None)
                tasks.append(data.ReadTask(read, meta))
            return tasks

    return RangeSquaresDatasource


def test_a_custom_datasource_reads_the_same_rows(ray_data):
    for blocks in (3,):
        mine = rd.read_datasource(datasource_classes(rd)(23), override_num_blocks=blocks)
        theirs = ray_data.read_datasource(datasource_classes(ray_data)(23), override_num_blocks=blocks)
        assert mine.count() == theirs.count() == 23
        assert sorted_rows(mine, "id") == sorted_rows(theirs, "id")
    assert rd.read_datasource(datasource_classes(rd)(10)).count() == 10  # Ray's default parallelism
    assert mine.schema().names == ["id", "sq"]


def file_datasource_class(data):
    """Ray's documented ``FileBasedDatasource`` subclass: one row per line of .txt files."""

    class LinesDatasource(data.datasource.FileBasedDatasource):
        def __init__(self, paths):
            super().__init__(paths, file_extensions=["txt"])

        def _read_stream(self, f, path):
            lines = f.readall().decode().splitlines()
            yield pa.table({"line": lines, "n": [len(x) for x in lines]})

    return LinesDatasource


def test_a_custom_file_datasource_reads_the_same_rows(ray_data, tmp_path):
    for i in range(3):
        (tmp_path / f"{i}.txt").write_text("\n".join("ab" * (i + j) for j in range(4)))
    (tmp_path / "skip.csv").write_text("not read")
    mine, theirs = (d.read_datasource(file_datasource_class(d)(str(tmp_path))) for d in (rd, ray_data))
    key = lambda r: (r["n"], r["line"])  # noqa: E731
    assert sorted(norm(mine.take_all()), key=key) == sorted(norm(theirs.take_all()), key=key)
    assert mine.count() == 12


def sink_classes(data):
    """A collecting ``Datasink`` and a CSV ``BlockBasedFileDatasink``, as Ray's docs write them."""

    class CollectingDatasink(data.Datasink):
        def __init__(self):
            self.calls, self.rows = [], []

        def on_write_start(self, schema=None):
            self.calls.append(("start",))  # Ray gives the schema, or None when not known yet

        def write(self, blocks, ctx):  # runs in a Ray task: what it returns is what the driver sees
            rows = []
            for b in blocks:
                rows += b.to_pylist() if hasattr(b, "to_pylist") else b.to_dict("records")
            return rows

        def on_write_complete(self, write_result):
            self.rows = sum(write_result.write_returns, [])
            self.calls.append(("complete", write_result.num_rows, len(self.rows)))

    class CSVDatasink(data.BlockBasedFileDatasink):
        def __init__(self, path):
            super().__init__(path, file_format="csv")

        def write_block_to_file(self, block, file):
            from pyarrow import csv

            csv.write_csv(block.to_arrow(), file)

    return CollectingDatasink, CSVDatasink


def test_a_custom_datasink_gets_the_same_rows_and_callbacks(ray_data, tmp_path):
    results = []
    for data in (rd, ray_data):
        collecting, csv_sink = sink_classes(data)
        sink = collecting()
        data.range(12).map(lambda r: {"id": r["id"], "x": r["id"] * 0.5}).write_datasink(sink)
        out = tmp_path / data.__name__
        data.range(9).write_datasink(csv_sink(str(out)))
        files = sorted(os.listdir(out))
        read_back = sorted(sum((open(out / f).read().split()[1:] for f in files), []), key=int)
        results.append(
            (sink.calls, sorted(sink.rows, key=lambda r: r["id"]), read_back, {f[-4:] for f in files})
        )
    mine, theirs = results
    assert mine[0][0] == theirs[0][0] and mine[0][-1] == theirs[0][-1]  # start(schema) ... complete(12, 12)
    assert mine[1:] == theirs[1:]


def test_a_failing_datasink_hears_of_it_and_the_error_is_raised():
    class Failing(rd.Datasink):
        failed = None

        def write(self, blocks, ctx):
            raise RuntimeError("disk full")

        def on_write_failed(self, error):
            Failing.failed = error

    with pytest.raises(RuntimeError, match="disk full"):
        rd.range(3).write_datasink(Failing())
    assert isinstance(Failing.failed, RuntimeError)
    with pytest.raises(TypeError, match="Datasink"):
        rd.range(3).write_datasink(object())


def test_read_sql_of_sqlite_is_rays(ray_data, tmp_path):
    db = str(tmp_path / "t.db")
    with sqlite3.connect(db) as c:
        c.execute("create table t(id integer, name text, v real)")
        c.executemany("insert into t values (?, ?, ?)", [(i, f"n{i}", i / 4) for i in range(15)])
    sql = "select id, name, v from t where id % 2 = 1"
    mine, theirs = (d.read_sql(sql, lambda: sqlite3.connect(db)) for d in (rd, ray_data))
    assert sorted_rows(mine, "id") == sorted_rows(theirs, "id")
    with pytest.raises(ValueError, match="returns no rows"):
        rd.read_sql("create table u(x)", lambda: sqlite3.connect(db))


def test_read_orc_is_rays_and_file_shuffle_draws_from_its_seed(ray_data, tmp_path):
    import pyarrow.orc as orc

    for i in range(4):
        orc.write_table(
            pa.table({"id": list(range(i * 5, i * 5 + 5)), "s": ["x" * i] * 5}), str(tmp_path / f"{i}.orc")
        )
    mine, theirs = (d.read_orc(str(tmp_path)) for d in (rd, ray_data))
    assert sorted_rows(mine, "id") == sorted_rows(theirs, "id")
    order = lambda ds: [r["id"] for r in ds.take_all()][::5]  # noqa: E731 - first row of each file
    a, b = (order(rd.read_orc(str(tmp_path), shuffle=rd.FileShuffleConfig(seed=s))) for s in (1, 1))
    assert a == b and sorted(a) == [0, 5, 10, 15]
    seen = {tuple(order(rd.read_orc(str(tmp_path), shuffle=rd.FileShuffleConfig(seed=s)))) for s in range(6)}
    assert len(seen) > 1


def write_shard(path, n):
    with tarfile.open(path, "w") as t:
        for i in range(n):
            for ext, data in (("txt", f"text {i}"), ("cls", str(i % 3)), ("json", json.dumps({"a": i}))):
                info = tarfile.TarInfo(f"s{i:04d}.{ext}")
                info.size = len(data.encode())
                t.addfile(info, io.BytesIO(data.encode()))


def test_read_webdataset_is_rays(ray_data, tmp_path):
    write_shard(tmp_path / "a.tar", 4)
    write_shard(tmp_path / "b.tar", 2)
    mine, theirs = (d.read_webdataset(str(tmp_path)) for d in (rd, ray_data))
    key = lambda r: (r["__url__"], r["__key__"])  # noqa: E731
    assert sorted(norm(mine.take_all()), key=key) == sorted(norm(theirs.take_all()), key=key)
    bad = tmp_path / "bad" / "p.tar"
    bad.parent.mkdir()
    with tarfile.open(bad, "w") as t:
        info = tarfile.TarInfo("x.pkl")
        info.size = 1
        t.addfile(info, io.BytesIO(b"."))
    with pytest.raises(ValueError, match="pickled"):
        rd.read_webdataset(str(bad))


def write_tfrecords(path, n):
    """tf.train.Example records, encoded with the message classes raynb declares."""
    from raynb.data.tfrecords import example_class

    Example = example_class()
    with open(path, "wb") as f:
        for i in range(n):
            ex = Example()
            ex.features.feature["i"].int64_list.value.append(i)
            ex.features.feature["f"].float_list.value.extend([0.5 * i, 1.25])
            ex.features.feature["b"].bytes_list.value.append(b"x" * i)
            data = ex.SerializeToString()
            f.write(struct.pack("<Q", len(data)) + b"\0" * 4 + data + b"\0" * 4)


def test_read_tfrecords_is_rays(ray_data, tmp_path):
    import importlib.util
    import sys

    if importlib.util.find_spec("tensorflow") is None:
        pytest.skip("Ray parses records with TensorFlow")
    write_tfrecords(tmp_path / "a.tfrecords", 5)
    had_tf = "tensorflow" in sys.modules
    mine = sorted_rows(rd.read_tfrecords(str(tmp_path)), "i")
    assert had_tf or "tensorflow" not in sys.modules  # raynb reads them without TensorFlow
    assert mine == sorted_rows(ray_data.read_tfrecords(str(tmp_path)), "i")


def test_from_huggingface_is_rays(ray_data):
    datasets = pytest.importorskip("datasets")
    hf = datasets.Dataset.from_dict({"x": list(range(8)), "y": [f"r{i}" for i in range(8)]})
    hf = hf.select([6, 2, 5]).train_test_split(test_size=1, shuffle=False)["train"]
    assert norm(rd.from_huggingface(hf).take_all()) == norm(ray_data.from_huggingface(hf).take_all())
    with pytest.raises(TypeError, match=r"one split.*\['a'\]"):
        rd.from_huggingface(datasets.DatasetDict({"a": hf}))


def test_names_that_need_services_say_why_and_what_to_use():
    from raynb.data import from_numpy_refs, read_delta

    with pytest.raises(NotImplementedError, match="object store.*from_numpy"):
        from_numpy_refs([np.zeros(3)])
    with pytest.raises(NotImplementedError, match="Delta Lake.*read_parquet"):
        read_delta("s3://t")
    assert rd.DatasetIterator is rd.DataIterator and rd.SaveMode("overwrite") is rd.SaveMode.OVERWRITE

"""A user's Datasource / Datasink that misbehaves (returns bad types, raises, miscounts)
gets an error naming the problem and the fix, and loses nothing without a word."""

from __future__ import annotations

import logging
import os

import numpy as np
import pyarrow as pa
import pytest

import raynb.data as rd
from raynb.data.datasource import BlockBasedFileDatasink, BlockMetadata, Datasink, Datasource, ReadTask


def _meta(n):
    return BlockMetadata(num_rows=n, size_bytes=None, input_files=None, exec_stats=None)


def _task(rows: int, said):
    return ReadTask(lambda: [pa.table({"x": list(range(rows))})], _meta(said))


class _Source(Datasource):
    def __init__(self, tasks, size=None):
        self.tasks, self.size = tasks, size

    def estimate_inmemory_data_size(self):
        return self.size

    def get_read_tasks(self, parallelism, **kw):
        return self.tasks


def test_get_read_tasks_returning_none_or_functions_names_the_fix():
    with pytest.raises(
        TypeError, match=r"_Source.get_read_tasks\(\) returned NoneType; return a list of ReadTask"
    ):
        rd.read_datasource(_Source(None))
    with pytest.raises(
        TypeError, match=r"get_read_tasks\(\)\[0\] is a function, not a ReadTask.*ReadTask\(read_fn"
    ):
        rd.read_datasource(_Source([lambda: [pa.table({"x": [1]})]]))


@pytest.mark.parametrize("said", [-3, "2", 1.5])
def test_a_row_count_that_is_not_one_is_refused_when_the_dataset_is_made(said):
    with pytest.raises(ValueError, match=r"read task 0's BlockMetadata\(num_rows=.*\) is not a row count"):
        rd.read_datasource(_Source([_task(2, said)]))


def test_a_numpy_row_count_is_a_row_count():
    assert rd.read_datasource(_Source([_task(2, np.int64(2))])).count() == 2


def test_an_infinite_size_estimate_is_ignored_not_an_overflow():
    ds = rd.read_datasource(_Source([_task(2, 2)], size=float("inf")))
    assert [r["x"] for r in ds.take_all()] == [0, 1]


def test_a_task_yielding_more_rows_than_its_metadata_says_is_an_error_not_a_silent_cut():
    ds = rd.read_datasource(_Source([_task(5, 2)]))
    with pytest.raises(ValueError, match=r"read task 0 yielded 5 rows, but its metadata said 2"):
        ds.take_all()
    ds = rd.read_datasource(_Source([_task(3, 3), _task(2, 2)]))  # right counts: all rows
    assert [r["x"] for r in ds.take_all()] == [0, 1, 2, 0, 1]


class _Sink(Datasink):
    def __init__(self, fail_at=None, failed_raises=False, min_rows=None):
        self.fail_at, self.failed_raises, self.min_rows = fail_at, failed_raises, min_rows
        self.failed, self.wrote = [], []

    @property
    def min_rows_per_write(self):
        return self.min_rows

    def write(self, blocks, ctx):
        if ctx.task_idx == self.fail_at:
            raise RuntimeError("disk full")
        self.wrote.append(sum(b.num_rows for b in blocks))

    def on_write_failed(self, error):
        self.failed.append(error)
        if self.failed_raises:
            raise KeyError("cleanup broke")


def test_a_write_failing_half_way_tells_on_write_failed_and_raises_the_writes_error(caplog):
    sink = _Sink(fail_at=1)
    with pytest.raises(RuntimeError, match="disk full"):
        rd.range(10).repartition(3).write_datasink(sink)
    assert sink.wrote == [4] and [str(e) for e in sink.failed] == ["disk full"]
    sink = _Sink(fail_at=1, failed_raises=True)  # on_write_failed raising does not hide it
    with caplog.at_level(logging.ERROR), pytest.raises(RuntimeError, match="disk full"):
        rd.range(10).repartition(3).write_datasink(sink)
    assert "_Sink.on_write_failed() raised" in caplog.text and "cleanup broke" in caplog.text


@pytest.mark.parametrize("bad", [0, -5, "3"])
def test_a_bad_min_rows_per_write_names_the_property(bad):
    with pytest.raises(ValueError, match=r"_Sink.min_rows_per_write is .*: give a number of rows >= 1"):
        rd.range(10).write_datasink(_Sink(min_rows=bad))


class _Csv(BlockBasedFileDatasink):
    def write_block_to_file(self, block, file):
        import pyarrow.csv as pc

        pc.write_csv(block.to_arrow(), file)


def test_a_file_datasinks_directory_is_private(tmp_path):
    out = tmp_path / "out"
    rd.range(10).write_datasink(_Csv(str(out), file_format="csv"))
    assert os.stat(out).st_mode & 0o777 == 0o700
    assert len(os.listdir(out)) == 1

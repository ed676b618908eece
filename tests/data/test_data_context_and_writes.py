"""Ray Data names a guide script uses that need no cluster: ``DataContext``, generator
functions in ``map_batches``, ``map_groups`` on n-d columns, ``write_csv`` /
``write_json`` / a file per block after ``repartition(n)``, ``randomize_block_order``."""

from __future__ import annotations

import os

import numpy as np
import pandas as pd
import pytest

import raynb.data as rd
from raynb.train import DataConfig


def test_data_context_is_one_per_process_with_ray_fields():
    rd.DataContext._set_current(rd.DataContext())  # a fresh context, whatever ran before
    ctx = rd.DataContext.get_current()
    assert ctx is rd.DataContext.get_current()
    assert ctx.execution_options.preserve_order is False and ctx.target_max_block_size == 128 * 1024 * 1024
    ctx.execution_options.preserve_order = True
    ctx.execution_options.resource_limits.object_store_memory = 1e9
    ctx.set_config("k", 1)
    assert rd.DataContext.get_current().get_config("k") == 1
    assert ctx.copy() is not ctx and ctx.copy().execution_options.preserve_order
    opts = DataConfig.default_ingest_options()
    assert isinstance(opts, rd.ExecutionOptions) and opts.locality_with_output is True
    rd.DataContext._set_current(rd.DataContext())


def test_generator_functions_and_groups_of_nd_columns():
    ds = rd.from_items([{"a": i} for i in range(6)])

    def twice(df):
        for k in range(2):
            yield df.assign(k=k)

    out = ds.map_batches(twice, batch_format="pandas", batch_size=3).to_pandas()
    assert len(out) == 12 and sorted(out["k"].unique()) == [0, 1]

    def nothing(batch):
        yield from ()

    assert ds.map_batches(nothing).count() == 0
    items = [{"img": np.full((2, 3), label, dtype=np.float32), "label": label} for label in (1, 0, 1)]
    seen = []

    def norm(group):
        seen.append(group["img"].shape)
        return {"img": group["img"] - group["img"].mean(), "label": group["label"]}

    assert rd.from_items(items).groupby("label").map_groups(norm).count() == 3
    assert seen == [(1, 2, 3), (2, 2, 3)]


def test_writes_one_file_per_block_in_each_format(tmp_path):
    ds = rd.from_pandas(pd.DataFrame({"x": np.arange(10), "s": [f"r{i}" for i in range(10)]}))
    assert ds.num_blocks() == 1 and ds.repartition(3).num_blocks() == 3
    files = ds.repartition(3).write_csv(str(tmp_path / "csv"))
    assert len(files) == 3 and sorted(os.listdir(tmp_path / "csv")) == [os.path.basename(f) for f in files]
    assert rd.read_csv(str(tmp_path / "csv")).to_pandas()["x"].tolist() == list(range(10))
    ds.write_json(str(tmp_path / "json"), num_rows_per_file=4)
    assert len(os.listdir(tmp_path / "json")) == 3
    assert sorted(rd.read_json(str(tmp_path / "json")).to_pandas()["s"]) == sorted(f"r{i}" for i in range(10))
    assert len(ds.write_parquet(str(tmp_path / "pq"))) == 1
    with pytest.raises(FileExistsError, match="already holds .parquet"):
        ds.write_parquet(str(tmp_path / "pq"))
    with pytest.raises(TypeError, match="filesystem"):
        ds.write_csv(str(tmp_path / "x"), filesystem=None)
    assert ds.randomize_block_order() is ds


def test_aggregations_and_more_constructors(tmp_path):
    from raynb.data.aggregate import AggregateFn, Count, Mean, Quantile, Std, Sum, Unique

    ds = rd.from_items([{"A": x % 3, "B": 2 * x} for x in range(10)])
    got = ds.aggregate(Count(), Mean("B"), Std("B", ddof=0), Quantile("B", q=0.5), Unique("A"))
    assert got == {
        "count()": 10,
        "mean(B)": 9.0,
        "std(B)": pytest.approx(5.744562646538029),
        "quantile(B)": 9.0,
        "unique(A)": [0, 1, 2],
    }
    assert ds.groupby("A").aggregate(Count(), Sum("B", alias_name="b")).take_all()[0] == {
        "A": 0,
        "count()": 4,
        "b": 36,
    }
    total = AggregateFn(init=lambda k: 0, accumulate_row=lambda a, r: a + r["B"], merge=None, name="t")
    assert ds.aggregate(total) == {"t": 90}
    with pytest.raises(TypeError, match="aggregate"):
        ds.aggregate("count")
    assert rd.range_tensor(3, shape=(2, 2)).take_batch(3)["data"][2].tolist() == [[2, 2], [2, 2]]
    (tmp_path / "t.txt").write_text("a\n\nb\n")
    np.save(tmp_path / "x.npy", np.ones((3, 2)))
    assert rd.read_text(str(tmp_path / "t.txt")).take_all() == [{"text": "a"}, {"text": "b"}]
    assert rd.read_numpy(str(tmp_path / "x.npy")).take_batch(3)["data"].shape == (3, 2)
    import pyarrow as pa

    assert rd.from_arrow(pa.table({"a": [1, 2]})).take_all() == [{"a": 1}, {"a": 2}]


def test_expression_filter_streaming_split_images(tmp_path):
    ds = rd.from_items([{"id": i, "s": "ab"[i % 2]} for i in range(10)])
    assert ds.filter(expr="id > 5").count() == 4
    assert ds.filter(expr="id < 4 and s == 'a'").take_all() == [{"id": 0, "s": "a"}, {"id": 2, "s": "a"}]
    with pytest.raises(ValueError, match="not a Python expression"):
        ds.filter(expr="id >")
    with pytest.raises(rd.MapBatchesError, match=r"no column \[.zz.\]"):
        ds.filter(expr="zz > 1").count()
    parts = ds.streaming_split(3, equal=True)
    assert [p.count() for p in parts] == [3, 3, 3]
    assert sum(1 for _ in ds.iterator().iter_rows()) == 10
    pil = pytest.importorskip("PIL.Image")
    for i in range(3):
        pil.fromarray(np.full((8, 6, 3), i * 40, np.uint8)).save(tmp_path / f"im{i}.png")
    batch = rd.read_images(str(tmp_path), include_paths=True).take_batch(3)
    assert batch["image"].shape == (3, 8, 6, 3) and batch["path"][2].endswith("im2.png")
    assert rd.read_images(str(tmp_path), size=(4, 4), mode="L").take_batch(1)["image"].shape == (1, 4, 4)
    assert rd.read_binary_files(str(tmp_path)).count() == 3


def test_zip_explain_input_files(tmp_path, capsys):
    a = rd.range(3)
    b = rd.range(3).map(lambda r: {"id": r["id"] * 10, "y": 1})
    assert a.zip(b).take_all()[2] == {"id": 2, "id_1": 20, "y": 1}
    with pytest.raises(ValueError, match="equal row counts"):
        a.zip(rd.range(4))
    a.map(lambda r: r).explain()
    assert "map(" in capsys.readouterr().out
    pd.DataFrame({"x": [1]}).to_csv(tmp_path / "f.csv", index=False)
    assert rd.read_csv(str(tmp_path / "f.csv")).input_files() == [str(tmp_path / "f.csv")]
    assert a.input_files() == []


def test_preprocessors_fit_and_transform_lazily():
    from raynb.data.preprocessors import (
        Concatenator,
        LabelEncoder,
        MinMaxScaler,
        OneHotEncoder,
        PreprocessorNotFittedException,
        SimpleImputer,
        StandardScaler,
    )

    df = pd.DataFrame({"a": [1.0, 2.0, 3.0, np.nan], "b": [0.0, 10.0, 20.0, 30.0], "y": ["x", "z", "x", "w"]})
    ds = rd.from_pandas(df)
    with pytest.raises(PreprocessorNotFittedException, match="fit"):
        StandardScaler(columns=["b"]).transform(ds)
    out = StandardScaler(columns=["b"]).fit_transform(ds).to_pandas()
    assert out["b"].mean() == pytest.approx(0) and out["b"].std(ddof=0) == pytest.approx(1)
    assert MinMaxScaler(columns=["b"], output_columns=["b01"]).fit_transform(ds).to_pandas()[
        "b01"
    ].tolist() == [
        0,
        1 / 3,
        2 / 3,
        1,
    ]
    assert SimpleImputer(columns=["a"]).fit_transform(ds).to_pandas()["a"].tolist() == [1, 2, 3, 2]
    assert LabelEncoder("y").fit_transform(ds).to_pandas()["y"].tolist() == [1, 2, 1, 0]
    onehot = OneHotEncoder(columns=["y"]).fit_transform(ds).take_batch(4)["y"]
    assert onehot.tolist()[0] == [0, 1, 0]
    filled = SimpleImputer(columns=["a"], strategy="constant", fill_value=0).transform(ds)
    batch = (
        Concatenator(columns=["a", "b"], output_column_name="features", dtype=np.float32)
        .transform(filled)
        .take_batch(4)
    )
    assert batch["features"].shape == (4, 2) and batch["features"].dtype == np.float32 and "a" not in batch

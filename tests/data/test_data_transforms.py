"""Ray Data's Dataset surface in raynb.data, in this process (no cluster): constructors,
lazy transforms, whole-dataset operations, consumption, a shard's methods, and the names
raynb does not serve. Expected values follow Ray 2.60's documented meanings
(tests/data/test_data_vs_ray.py runs the same calls on real ray.data)."""

from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pytest

import raynb.data as rd
from raynb.data import ActorPoolStrategy, MapBatchesError, TaskPoolStrategy


def items(n=10):
    return [{"a": i, "s": "x" * i, "l": list(range(i))} for i in range(n)]


def test_constructors_from_items_range_numpy_pandas_json(tmp_path):
    ds = rd.from_items(items())
    assert ds.columns() == ["a", "s", "l"] and ds.count() == 10
    assert ds.take(2) == [{"a": 0, "s": "", "l": []}, {"a": 1, "s": "x", "l": [0]}]
    assert rd.from_items([1, 2, 3]).take_all() == [{"item": 1}, {"item": 2}, {"item": 3}]
    assert rd.range(4).take_batch()["id"].tolist() == [0, 1, 2, 3]
    assert rd.range(4).take_batch()["id"].dtype == np.int64
    assert rd.from_numpy(np.ones((2, 3))).take_batch()["data"].shape == (2, 3)
    assert rd.from_numpy([np.zeros(2), np.ones(3)]).count() == 5
    df = pd.DataFrame({"x": [1.0, 2.0], "tags": [["a"], ["b", "c"]], "d": [{"k": 1}, {"j": 2}]})
    got = rd.from_pandas(df).take_all()
    assert got == [{"x": 1.0, "tags": ["a"], "d": {"k": 1}}, {"x": 2.0, "tags": ["b", "c"], "d": {"j": 2}}]
    path = tmp_path / "rows.jsonl"
    path.write_text("".join(json.dumps({"id": i, "name": f"n{i}"}) + "\n" for i in range(5)))
    js = rd.read_json(str(path))
    assert js.count() == 5 and js.take(1) == [{"id": 0, "name": "n0"}]
    with pytest.raises(NotImplementedError, match="lines=False"):
        rd.read_json(str(path), lines=False)
    with pytest.raises(ValueError, match="from_items"):
        rd.from_items([])
    with pytest.raises(ValueError, match=r"range\(-1\)"):
        rd.range(-1)


def test_row_transforms_map_flat_map_filter_and_columns():
    ds = rd.from_items(items())
    doubled = ds.map(lambda r: {**r, "b": r["a"] * 2}).filter(lambda r: r["a"] % 2 == 0)
    assert [r["b"] for r in doubled.take_all()] == [0, 4, 8, 12, 16]
    assert ds.flat_map(lambda r: [r, r]).count() == 20
    assert ds.flat_map(lambda r: [{"w": c} for c in r["s"]]).count() == 45
    added = ds.add_column("c", lambda df: df["a"] + 1)
    assert added.columns() == ["a", "s", "l", "c"] and added.take_batch(3)["c"].tolist() == [1, 2, 3]
    assert ds.drop_columns(["l", "s"]).columns() == ["a"]
    assert ds.select_columns(["s", "a"]).take(2) == [{"s": "", "a": 0}, {"s": "x", "a": 1}]
    assert ds.select_columns("a").columns() == ["a"]
    assert ds.rename_columns({"a": "id"}).columns() == ["id", "s", "l"]
    assert ds.rename_columns(["x", "y", "z"]).take(1) == [{"x": 0, "y": "", "z": []}]
    big = rd.range(2000)
    assert 800 < big.random_sample(0.5, seed=1).count() < 1200
    assert big.random_sample(0.5, seed=1).take_all() == big.random_sample(0.5, seed=1).take_all()
    with pytest.raises(ValueError, match=r"select_columns: no column \['zz'\]"):
        ds.select_columns(["zz"]).take(1)
    assert ds.filter(lambda r: False).count() == 0 and ds.filter(lambda r: False).take(3) == []
    with pytest.raises(TypeError, match="string predicate"):
        ds.filter(expr=object())
    with pytest.raises(
        MapBatchesError, match=r"map\(.*<lambda>\) raised on batch 0 of rank 0: ZeroDivisionError"
    ):
        ds.map(lambda r: {"x": 1 / 0}).take(1)
    with pytest.raises(TypeError, match=r"map\(.*<lambda>\) returned a int; a row is a dict"):
        ds.map(lambda r: 1).take(1)


def test_map_batches_formats_sizes_args_and_a_class_built_once():
    ds = rd.range(10)
    assert [
        len(b["id"]) for b in ds.map_batches(lambda b: b, batch_size=4).iter_batches(batch_size=None)
    ] == [4, 4, 2]
    seen = []
    for fmt, kind in (("default", dict), ("numpy", dict), ("pandas", pd.DataFrame)):
        ds.map_batches(lambda b, k=kind: seen.append(isinstance(b, k)) or b, batch_format=fmt).count()
    import pyarrow as pa

    out = ds.map_batches(lambda t: t.append_column("two", pa.array([2] * t.num_rows)), batch_format="pyarrow")
    assert out.take(1) == [{"id": 0, "two": 2}] and all(seen)
    scaled = ds.map_batches(lambda b, k, off=0: {"id": b["id"] * k + off}, fn_args=(3,), fn_kwargs={"off": 1})
    assert scaled.take_batch(3)["id"].tolist() == [1, 4, 7]

    class AddN:
        built = 0

        def __init__(self, n):
            AddN.built += 1
            self.n = n

        def __call__(self, batch):
            return {"id": batch["id"] + self.n}

    for kw in (
        {"compute": ActorPoolStrategy(size=2)},
        {"concurrency": 2},
        {"compute": ActorPoolStrategy(min_size=1, max_size=4)},
    ):
        AddN.built = 0
        mapped = ds.map_batches(AddN, fn_constructor_args=(100,), batch_size=2, **kw)
        assert mapped.take_all()[-1] == {"id": 109} and mapped.count() == 10
        assert AddN.built == 1, f"{kw}: the class was built {AddN.built} times, once per process expected"
    with pytest.raises(ValueError, match="callable class runs in an actor pool"):
        ds.map_batches(AddN, compute=TaskPoolStrategy(size=2))
    with pytest.raises(ValueError, match="size, or min_size"):
        ActorPoolStrategy(size=2, max_size=3)
    with pytest.raises(TypeError, match="fn_constructor_args.*for a callable class"):
        ds.map_batches(lambda b: b, fn_constructor_args=(1,))
    with pytest.raises(TypeError, match=r"unexpected arguments \['bogus'\]"):
        ds.map_batches(lambda b: b, bogus=1)
    with pytest.raises(ValueError, match="batch_format='arrow'"):
        ds.map_batches(lambda b: b, batch_format="arrow")
    assert ds.map_batches(lambda b: b, num_cpus=1, batch_size="auto").count() == 10  # no effect: accepted


def test_whole_dataset_ops_sort_groupby_split_limit_union():
    ds = rd.from_items([{"k": i % 3, "v": float(i), "s": f"r{i}"} for i in range(10)])
    assert [r["v"] for r in ds.sort("v", descending=True).take(3)] == [9.0, 8.0, 7.0]
    assert [(r["k"], r["v"]) for r in ds.sort(["k", "v"], descending=[False, True]).take(2)] == [
        (0, 9.0),
        (0, 6.0),
    ]
    assert [r["s"] for r in ds.sort("s").take(3)] == ["r0", "r1", "r2"]
    assert ds.groupby("k").count().take_all() == [
        {"k": 0, "count()": 4},
        {"k": 1, "count()": 3},
        {"k": 2, "count()": 3},
    ]
    assert ds.groupby("k").mean("v").take_all() == [
        {"k": 0, "mean(v)": 4.5},
        {"k": 1, "mean(v)": 4.0},
        {"k": 2, "mean(v)": 5.0},
    ]
    assert [r["sum(v)"] for r in ds.groupby("k").sum("v").take_all()] == [18.0, 12.0, 15.0]
    assert [r["min(v)"] for r in ds.groupby("k").min("v").take_all()] == [0.0, 1.0, 2.0]
    assert [r["max(v)"] for r in ds.groupby("k").max("v").take_all()] == [9.0, 7.0, 8.0]
    assert ds.sum("v") == 45.0 and ds.mean("v") == 4.5 and ds.max("k") == 2
    assert ds.sum(["v", "k"]) == {"sum(v)": 45.0, "sum(k)": 9}
    assert sorted(ds.unique("k")) == [0, 1, 2]
    assert [d.count() for d in ds.split(3)] == [3, 3, 4]
    assert [d.count() for d in ds.split(3, equal=True)] == [3, 3, 3]
    parts = [r["v"] for d in ds.split(4) for r in d.take_all()]
    assert sorted(parts) == [float(i) for i in range(10)]
    assert [r["v"] for r in ds.limit(3).take_all()] == [0.0, 1.0, 2.0]
    assert ds.limit(4).union(ds.limit(2), ds.limit(1)).count() == 7
    assert ds.repartition(3).count() == 10 and ds.repartition(2, shuffle=True).count() == 10
    with pytest.raises(ValueError, match="different|columns"):
        ds.union(rd.range(3)).count()
    with pytest.raises(ValueError, match=r"sort\(key='zz'\): no column"):
        ds.sort("zz")


def test_train_test_split_and_random_shuffle_seeded():
    ds = rd.range(10)
    train, test = ds.train_test_split(test_size=0.3)
    assert [r["id"] for r in test.take_all()] == [7, 8, 9] and train.count() == 7
    train, test = ds.train_test_split(test_size=2)
    assert [r["id"] for r in test.take_all()] == [8, 9]
    a = ds.train_test_split(0.5, shuffle=True, seed=7)
    b = ds.train_test_split(0.5, shuffle=True, seed=7)
    ids = lambda d: [r["id"] for r in d.take_all()]  # noqa: E731
    assert ids(a[1]) == ids(b[1]) and sorted(ids(a[0]) + ids(a[1])) == list(range(10))
    assert ids(a[1]) != [5, 6, 7, 8, 9]
    assert ids(ds.random_shuffle(seed=3)) == ids(ds.random_shuffle(seed=3)) != list(range(10))
    for bad in (0.0, 1.0, 10, 0):
        with pytest.raises(ValueError, match="test_size"):
            ds.train_test_split(bad)


def test_consumption_show_take_all_schema_materialize_to_pandas_iter(capsys):
    ds = rd.from_items(items(5)).map(lambda r: {**r, "n": len(r["l"])})
    ds.show(2)
    assert capsys.readouterr().out.splitlines() == [
        "{'a': 0, 's': '', 'l': [], 'n': 0}",
        "{'a': 1, 's': 'x', 'l': [0], 'n': 1}",
    ]
    assert len(ds.take_all()) == 5
    with pytest.raises(ValueError, match="more than 3 rows"):
        ds.take_all(limit=3)
    with pytest.raises(ValueError, match="more than 3 rows.*limit"):
        ds.to_pandas(limit=3)
    assert ds.schema().names == ["a", "s", "l", "n"] and "object (list)" in repr(ds.schema())
    m = ds.materialize()
    assert type(m).__name__ == "MaterializedDataset" and m.count() == 5 and m.take(1)[0]["n"] == 0
    df = ds.to_pandas()
    assert list(df.columns) == ["a", "s", "l", "n"] and df["l"].tolist()[2] == [0, 1]
    assert [r["a"] for r in ds.iter_rows()] == [0, 1, 2, 3, 4]
    assert [len(b["a"]) for b in ds.iter_batches(batch_size=2)] == [2, 2, 1]
    table = next(iter(ds.iter_batches(batch_size=5, batch_format="pyarrow")))
    assert table.num_rows == 5 and table.column("l").to_pylist()[2] == [0, 1]
    assert ds.take_batch(2, batch_format="pandas")["s"].tolist() == ["", "x"]
    torch_batches = list(ds.select_columns(["a", "n"]).iter_torch_batches(batch_size=5))
    assert torch_batches[0]["n"].tolist() == [0, 1, 2, 3, 4]
    with pytest.raises(ValueError, match="column 's' has dtype object"):
        next(iter(ds.iter_torch_batches(batch_size=5)))
    with pytest.raises(ValueError, match="no rows"):
        ds.filter(lambda r: False).take_batch()


def test_a_shard_iter_rows_materialize_to_pandas():
    ds = rd.from_items(items(10))
    shards = [ds.shard(2, r) for r in range(2)]
    rows = [[r["a"] for r in s.iter_rows()] for s in shards]
    assert rows == [[0, 1, 2, 3, 4], [5, 6, 7, 8, 9]]
    m = shards[1].materialize()
    assert m.count() == 5 and m.take(1)[0]["l"] == [0, 1, 2, 3, 4]
    assert shards[0].to_pandas()["s"].tolist() == ["", "x", "xx", "xxx", "xxxx"]
    assert [len(b["a"]) for b in shards[0].iter_batches(batch_size=2)] == [2, 2, 1]
    with pytest.raises(AttributeError, match="DataIterator.to_torch is Ray Data's.*coming-from-ray"):
        shards[0].to_torch


def test_names_raynb_does_not_serve_raise_naming_them():
    ds = rd.range(3)
    for name in ("join", "mix", "write_numpy", "iter_tf_batches"):
        with pytest.raises(AttributeError, match=rf"Dataset\.{name} is Ray Data's.*coming-from-ray\.md"):
            getattr(ds, name)
    with pytest.raises(AttributeError, match=r"ray\.data\.Catalog is Ray Data's.*coming-from-ray"):
        rd.Catalog
    with pytest.raises(AttributeError, match="has no attribute 'nonsense'"):
        ds.nonsense
    with pytest.raises(NotImplementedError, match="stratify"):
        ds.train_test_split(0.5, stratify="id")

"""Dataset.map_batches(fn, num_workers=N): batch inference on the warm pool, with real
ranks writing parquet parts that the returned dataset reads back in order."""

from __future__ import annotations

import os
import sys

import cloudpickle
import numpy as np
import pandas as pd
import pytest

import raynb.data
from raynb.errors import RunError
from raynb.train import RunConfig

xgboost = pytest.importorskip("xgboost")
cloudpickle.register_pickle_by_value(sys.modules[__name__])


class Predictor:
    """Loads the model once per worker (counted in a file per construction)."""

    def __init__(self, model_path, count_dir):
        import xgboost

        self.booster = xgboost.Booster()
        self.booster.load_model(model_path)
        open(os.path.join(count_dir, f"built-{os.getpid()}-{id(self)}"), "w").close()

    def __call__(self, batch: pd.DataFrame) -> pd.DataFrame:
        import xgboost

        p = self.booster.predict(xgboost.DMatrix(batch.drop(columns=["id"])))
        return pd.DataFrame({"id": batch["id"].to_numpy(), "p": p})


def _data(n=5000, d=8):
    rng = np.random.default_rng(0)
    X = rng.normal(size=(n, d)).astype(np.float32)
    y = (X[:, 0] + X[:, 1] > 0).astype(np.int64)
    return pd.DataFrame(X, columns=[f"f{i}" for i in range(d)]).assign(id=np.arange(n)), y


def test_class_built_once_per_worker_order_kept_same_predictions(warm, tmp_path):
    df, y = _data()
    features = df.drop(columns=["id"])
    booster = xgboost.train(
        {"objective": "binary:logistic", "nthread": 1}, xgboost.DMatrix(features, label=y), 10
    )
    model = str(tmp_path / "model.ubj")
    booster.save_model(model)
    single = booster.predict(xgboost.DMatrix(features))
    path = tmp_path / "in"
    path.mkdir()
    df.to_parquet(path / "a.parquet", row_group_size=700)  # row groups that do not divide the batches
    counts = tmp_path / "counts"
    counts.mkdir()
    ds = raynb.data.read_parquet(str(path))
    out = ds.map_batches(
        Predictor,
        batch_size=256,
        num_workers=3,
        batch_format="pandas",
        fn_constructor_kwargs={"model_path": model, "count_dir": str(counts)},
        preserve_order=True,
        run_config=RunConfig(verbose=0, storage_path=str(tmp_path)),
    )
    built = os.listdir(counts)
    assert len(built) == 3 and len({b.split("-")[1] for b in built}) == 3  # once per worker, 3 workers
    got = out.to_pandas()
    assert list(got["id"]) == list(range(len(df)))  # the input's order
    np.testing.assert_allclose(got["p"].to_numpy(), single, rtol=1e-6)
    assert out.take(2)[1]["id"] == 1
    files = out.write_parquet(str(tmp_path / "copy"))
    assert pd.read_parquet(files[0])["id"].tolist() == list(range(len(df)))


def _drop_last_row(batch):
    return {k: v[:-1] for k, v in batch.items()}


def _double(batch, factor=2):
    return {"x2": batch["x"] * factor}


def test_function_on_in_memory_data_and_a_changed_row_count_named(warm, tmp_path):
    ds = raynb.data.from_numpy({"x": np.arange(10_000, dtype=np.int64)})
    rc = RunConfig(verbose=0, storage_path=str(tmp_path))
    out = ds.map_batches(_double, batch_size=1000, num_workers=2, fn_kwargs={"factor": 3}, run_config=rc)
    assert out.to_pandas()["x2"].tolist() == list(range(0, 30_000, 3))
    with pytest.raises(RunError, match=r"batch \d+ has 1000 rows but the function returned 999"):
        ds.map_batches(_drop_last_row, batch_size=1000, num_workers=2, preserve_order=True, run_config=rc)
    # without preserve_order a function may filter rows
    assert out.count() == 10_000
    kept = ds.map_batches(_drop_last_row, batch_size=1000, num_workers=2, run_config=rc)
    assert kept.count() == 10_000 - 10


def test_bad_arguments_named_before_a_run(warm):
    ds = raynb.data.from_numpy({"x": np.arange(10)})
    with pytest.raises(ValueError, match="num_workers=0"):
        ds.map_batches(_double, num_workers=0)
    with pytest.raises(ValueError, match="batch_size=-1"):
        ds.map_batches(_double, num_workers=1, batch_size=-1)
    with pytest.raises(TypeError, match="fn_constructor_kwargs are for a class"):
        ds.map_batches(_double, num_workers=1, fn_constructor_kwargs={"a": 1})


CAP = 32 << 20  # each worker's memory cap in this test: 32 MiB of growth past its first batches


class Embed:
    """Makes 1 KiB of incompressible floats per row (an embedding), and keeps in a file this
    rank's highest resident-memory growth past its first 4 batches (which load pyarrow's
    parquet writer and fill the allocator's pools: a fixed cost, not one that grows)."""

    def __init__(self, log_dir):
        import psutil

        self.proc = psutil.Process()
        self.calls, self.base, self.peak = 0, None, 0
        self.log = os.path.join(log_dir, f"rss-{os.getpid()}")
        self.rng = np.random.default_rng(os.getpid())

    def __call__(self, batch):
        n = len(batch["id"])
        out = {"id": batch["id"], "emb": self.rng.random((n, 256), dtype=np.float32)}
        self.calls += 1
        rss = self.proc.memory_info().rss
        if self.calls == 4:
            self.base = rss
        if self.base is not None:
            self.peak = max(self.peak, rss - self.base)
        with open(self.log, "w") as f:
            f.write(str(self.peak))
        return out


def test_memory_stays_bounded_writing_a_result_larger_than_the_cap(warm, tmp_path):
    n = 160 * 1024  # 160 MiB of embeddings: over 3x the cap
    ds = raynb.data.from_numpy({"id": np.arange(n, dtype=np.int64)})
    logs = tmp_path / "rss"
    logs.mkdir()
    out = ds.map_batches(
        Embed,
        batch_size=2048,
        num_workers=2,
        fn_constructor_kwargs={"log_dir": str(logs)},
        output_path=str(tmp_path / "emb"),
        preserve_order=True,
        run_config=RunConfig(verbose=0, storage_path=str(tmp_path)),
    )
    written = sum(os.path.getsize(tmp_path / "emb" / f) for f in os.listdir(tmp_path / "emb"))
    assert written > 3 * CAP
    peaks = [int((logs / f).read_text()) for f in os.listdir(logs)]
    assert len(peaks) == 2 and max(peaks) < CAP, [p >> 20 for p in peaks]
    first = next(out.iter_batches(batch_size=4))
    assert first["id"].tolist() == [0, 1, 2, 3] and first["emb"].shape == (4, 256)


def test_the_pane_shows_rows_done_and_rows_per_second(warm, tmp_path, capsys):
    ds = raynb.data.from_numpy({"x": np.arange(4000, dtype=np.int64)})
    out = ds.map_batches(
        _double, batch_size=500, num_workers=2, run_config=RunConfig(verbose=1, storage_path=str(tmp_path))
    )
    text = capsys.readouterr().out
    assert "MapBatches_" in text and "rows=" in text and "rows_per_s=" in text, text
    assert out.count() == 4000

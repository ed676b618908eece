"""The main job: a small CNN on scikit-learn's digits, trained with DDP on warm workers.

``raynb demo --workers 4`` runs it from a terminal; ``notebooks/01_quickstart.ipynb``
runs the same training from ``%%ray_train`` cells.
"""

from __future__ import annotations

import time


def load_digits_split(seed: int = 0):
    """scikit-learn's 1,797 real 8x8 digit images, split 80/20 (stratified).

    Returns:
        (X_train, y_train, X_val, y_val): float32 arrays of shape (n, 1, 8, 8)
        scaled to [0, 1], and int64 labels 0..9.
    """
    import numpy as np
    from sklearn.datasets import load_digits
    from sklearn.model_selection import train_test_split

    digits = load_digits()
    X = (digits.images / 16.0).astype(np.float32)[:, None, :, :]
    y = digits.target.astype(np.int64)
    X_tr, X_va, y_tr, y_va = train_test_split(X, y, test_size=0.2, random_state=seed, stratify=y)
    return X_tr, y_tr, X_va, y_va


def make_model(hidden: int = 64):
    """A two-conv CNN for 1x8x8 inputs, 10 classes."""
    from torch import nn

    return nn.Sequential(
        nn.Conv2d(1, 16, 3, padding=1),
        nn.ReLU(),
        nn.Conv2d(16, 32, 3, padding=1),
        nn.ReLU(),
        nn.MaxPool2d(2),
        nn.Flatten(),
        nn.Linear(32 * 4 * 4, hidden),
        nn.ReLU(),
        nn.Linear(hidden, 10),
    )


def train_digits(config: dict, data=None) -> None:
    """The per-worker training loop (``train_loop_per_worker``).

    config keys: ``lr`` (float), ``batch_size`` (int, per rank), ``epochs`` (int),
    ``hidden`` (int). ``data``: the arrays of :func:`load_digits_split`, loaded
    once by the caller and shipped with the function (each worker loads them
    itself when None).
    """
    import torch
    from torch.utils.data import DataLoader, TensorDataset

    from raynb.train import get_context, report
    from raynb.train.torch import prepare_data_loader, prepare_model

    torch.manual_seed(0)
    X_tr, y_tr, X_va, y_va = data if data is not None else load_digits_split()
    train = DataLoader(
        TensorDataset(torch.from_numpy(X_tr), torch.from_numpy(y_tr)),
        batch_size=config.get("batch_size", 32),
        shuffle=True,
    )
    train = prepare_data_loader(train)
    model = prepare_model(make_model(config.get("hidden", 64)))
    opt = torch.optim.Adam(model.parameters(), lr=config.get("lr", 3e-3))
    loss_fn = torch.nn.CrossEntropyLoss()
    Xv, yv = torch.from_numpy(X_va), torch.from_numpy(y_va)
    for epoch in range(config.get("epochs", 10)):
        model.train()
        total, n = 0.0, 0
        for xb, yb in train:
            opt.zero_grad()
            loss = loss_fn(model(xb), yb)
            loss.backward()
            opt.step()
            total += loss.item() * len(xb)
            n += len(xb)
        model.eval()
        with torch.no_grad():
            out = model(Xv)
            val_loss = loss_fn(out, yv).item()
            val_acc = (out.argmax(1) == yv).float().mean().item()
        report({"epoch": epoch, "loss": total / max(n, 1), "val_loss": val_loss, "val_accuracy": val_acc})
    if get_context().get_world_rank() == 0:
        print(f"final validation accuracy {val_acc:.3f}")


def run_demo(num_workers: int = 4, epochs: int = 12, lr: float = 3e-3) -> int:
    """Train twice on ``num_workers`` warm ranks; the second run (twice the learning
    rate) shows the warm re-run.

    A cluster that was already running is used and left running. A cluster the
    demo starts is stopped at the end (so the demo leaves no process behind);
    ``raynb start`` first to keep one warm.

    Returns:
        0 when the last run reached 95 % validation accuracy, else 1.
    """
    from .client.connection import connect, disconnect
    from .cluster.launch.local import running_cluster, stop_cluster

    data = load_digits_split()  # once here, shipped to the workers with the function
    print(
        f"raynb demo: a CNN on scikit-learn digits ({len(data[0]):,} training / "
        f"{len(data[2]):,} validation 8x8 images), {epochs} epochs, DDP on {num_workers} workers"
    )
    t0 = time.perf_counter()
    started = running_cluster() is None
    connect(num_workers=num_workers)
    print(
        f"{'started a local cluster' if started else 'using the running cluster'} "
        f"in {time.perf_counter() - t0:.1f}s"
    )
    results, overheads = [], []
    try:
        for i, rate in enumerate((lr, lr * 2)):
            result, overhead = _timed_fit(i, data, rate, num_workers, epochs)
            results.append(result)
            overheads.append(overhead)
    finally:
        disconnect()
        if started:
            stop_cluster()
            print("\nstopped the cluster this demo started (run `raynb start` first to keep one warm)")
        else:
            print("\nthe cluster is still running (`raynb status`, `raynb stop`)")
    acc = results[-1].metrics["val_accuracy"]
    print(
        f"warm re-run overhead (wall time minus time on the workers): {overheads[-1] * 1000:.0f} ms; "
        f"final validation accuracy {acc:.3f} ({'>=' if acc >= 0.95 else 'below'} 0.95)"
    )
    return 0 if acc >= 0.95 else 1


def _timed_fit(i: int, data, rate: float, num_workers: int, epochs: int):
    """The demo's run ``i`` (0-based) at learning rate ``rate``, printed as it ends.

    Returns:
        (Result, float): the run's result and its overhead in seconds (wall time minus the
        time on the workers: submit + collect).
    """
    from functools import partial

    from .train import RunConfig, ScalingConfig
    from .train.torch import TorchTrainer

    print(f"\n--- run {i + 1}: lr={rate:g}{' (warm re-run)' if i else ''}")
    t = time.perf_counter()
    trainer = TorchTrainer(
        partial(train_digits, data=data),
        train_loop_config={"lr": rate, "batch_size": 32, "epochs": epochs, "hidden": 64},
        scaling_config=ScalingConfig(num_workers=num_workers),
        run_config=RunConfig(name=None),
    )
    result = trainer.fit()
    wall = time.perf_counter() - t
    overhead = wall - (result.time_total_s or 0.0)
    print(
        f"run {i + 1} (lr={rate:g}): val_accuracy={result.metrics['val_accuracy']:.3f} "
        f"in {wall:.1f}s ({result.time_total_s:.1f}s on the workers, "
        f"{overhead * 1000:.0f} ms submit + collect); results in {result.path}"
    )
    return result, overhead

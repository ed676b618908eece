"""The GPU checks, for a machine with NVIDIA GPUs (none run in CI, which has none).

Starts a private local cluster, then prints as JSON: what NVML sees, a `use_gpu` run on
every GPU (NCCL all-reduce; each rank sees its own device), the GPU columns of
`raynb status` sampled while a rank holds GPU memory, and the run's peak GPU memory in
run.json. Run: ``python tools/gpu_check.py``. Exits 1 when a check fails, 2 without GPUs.
"""

from __future__ import annotations

import json
import os
import shutil
import sys
import tempfile
import time


def _train(config):
    import time

    import torch
    import torch.distributed as dist

    from raynb.train import get_context, report

    rank = get_context().get_world_rank()
    device = torch.device("cuda", torch.cuda.current_device())
    x = torch.ones(256, 1024, 1024, device=device)  # 1 GiB held while the samples come
    total = torch.tensor([float(rank + 1)], device=device)
    dist.all_reduce(total)
    time.sleep(config["hold_s"])
    report(
        {
            "sum": total.item(),
            "device": str(device),
            "backend": dist.get_backend(),
            "visible": os.environ.get("CUDA_VISIBLE_DEVICES", ""),
        }
    )
    del x


def main() -> int:
    try:
        import pynvml

        pynvml.nvmlInit()
        n = pynvml.nvmlDeviceGetCount()
    except Exception as e:  # noqa: BLE001
        print(json.dumps({"gpus": 0, "why": str(e)}))
        return 2
    home, store = tempfile.mkdtemp(), tempfile.mkdtemp()
    os.environ.update(RAYNB_HOME=home, RAYNB_STORAGE_PATH=store)
    import raynb
    from raynb.client.status import format_status
    from raynb.cluster.launch import start_cluster, stop_cluster

    out = {"gpus": n}
    start_cluster(num_workers=n)
    try:
        import threading

        seen = {}

        def sample():
            time.sleep(4)
            seen["status"] = format_status(raynb.cluster_status())

        t = threading.Thread(target=sample)
        t.start()
        result = raynb.TorchTrainer(
            _train,
            train_loop_config={"hold_s": 6},
            scaling_config=raynb.ScalingConfig(num_workers=n, use_gpu=True),
            run_config=raynb.RunConfig(verbose=0),
        ).fit()
        t.join()
        record = json.load(open(os.path.join(result.path, "run.json")))
        out.update(
            metrics=result.metrics, status=seen.get("status"), peak_resources=record.get("peak_resources")
        )
        ok = (
            result.metrics["sum"] == n * (n + 1) / 2
            and result.metrics["backend"] == "nccl"
            and "gpu mem" in (seen.get("status") or "")
            and all(p.get("gpu_mem_used", 0) > 2**30 for p in record["peak_resources"].values())
        )
        out["ok"] = ok
    finally:
        stop_cluster()
        shutil.rmtree(home, ignore_errors=True)
        shutil.rmtree(store, ignore_errors=True)
    print(json.dumps(out, indent=1, default=str))
    return 0 if out.get("ok") else 1


if __name__ == "__main__":
    sys.exit(main())

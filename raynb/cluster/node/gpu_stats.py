"""GPU use of the workers of a node, from NVML (``nvidia-ml-py``), for ``raynb status``
and the progress pane.

The node agent samples once a second with the CPU and memory figures. On a machine
without an NVIDIA driver (or without ``nvidia-ml-py``) the sampler is off: it returns
nothing and never raises, so the GPU columns are simply absent.
"""
from __future__ import annotations

import logging

log = logging.getLogger("raynb.node")


class GpuSampler:
    """Per-process GPU memory and per-device utilization, by NVML.

    ``sample(pids)`` returns ``{pid: {"gpu": index, "gpu_util": percent,
    "gpu_mem_used": bytes (this process), "gpu_mem_total": bytes (the device)}}`` for
    each of ``pids`` that holds memory on a GPU (its first GPU when several).
    """

    def __init__(self):
        self._nvml = None
        self._handles: list = []
        try:
            import pynvml

            pynvml.nvmlInit()
            self._handles = [pynvml.nvmlDeviceGetHandleByIndex(i)
                             for i in range(pynvml.nvmlDeviceGetCount())]
            self._nvml = pynvml
        except Exception as e:  # noqa: BLE001 - no library, no driver, no device: no GPU columns
            log.debug("no GPU statistics: %s", e)

    @property
    def enabled(self) -> bool:
        return self._nvml is not None and bool(self._handles)

    def sample(self, pids) -> dict[int, dict]:
        if not self.enabled:
            return {}
        wanted, out = set(pids), {}
        nv = self._nvml
        for index, handle in enumerate(self._handles):
            try:
                util = nv.nvmlDeviceGetUtilizationRates(handle).gpu
                total = nv.nvmlDeviceGetMemoryInfo(handle).total
                procs = nv.nvmlDeviceGetComputeRunningProcesses(handle)
            except nv.NVMLError as e:
                log.debug("GPU %d: %s", index, e)
                continue
            for p in procs:
                if p.pid in wanted and p.pid not in out:
                    used = p.usedGpuMemory if isinstance(p.usedGpuMemory, int) else None
                    out[p.pid] = {"gpu": index, "gpu_util": util, "gpu_mem_used": used,
                                  "gpu_mem_total": total}
        return out

    def close(self) -> None:
        if self._nvml is not None:
            try:
                self._nvml.nvmlShutdown()
            except Exception:  # noqa: BLE001
                pass
            self._nvml = None

"""Ray Data's process-wide settings (``ray.data.DataContext``, ``ExecutionOptions``,
``ExecutionResources``), as raynb reads them.

Scripts set these to tune Ray's streaming executor (block sizes, progress bars, the
order of output rows, resource limits). raynb has no such executor: a dataset's
transforms run in the process that reads its rows, batch after batch, so the output is
always in input order (``preserve_order`` is true in effect whatever it is set to) and
there are no blocks to size. The fields keep Ray 2.60's names and defaults so that a
script reads and sets them; only ``execution_options.preserve_order`` is described by
what raynb does, the others have no effect (docs/data.md).
"""

from __future__ import annotations

import copy
import threading
from dataclasses import dataclass, field


@dataclass
class ExecutionResources:
    """Resource amounts (``cpu``, ``gpu``, ``object_store_memory`` in bytes; None: no limit)."""

    cpu: float | None = None
    gpu: float | None = None
    object_store_memory: float | None = None
    memory: float | None = None

    @classmethod
    def for_limits(cls, cpu=None, gpu=None, object_store_memory=None, memory=None) -> "ExecutionResources":
        return cls(cpu, gpu, object_store_memory, memory)


@dataclass
class ExecutionOptions:
    """Ray's execution options: ``resource_limits``, ``exclude_resources``,
    ``locality_with_output``, ``preserve_order``, ``actor_locality_enabled``,
    ``verbose_progress``. raynb keeps rows in order always; the rest have no effect."""

    resource_limits: ExecutionResources = field(default_factory=ExecutionResources)
    exclude_resources: ExecutionResources = field(default_factory=ExecutionResources)
    locality_with_output: bool | list = False
    preserve_order: bool = False
    actor_locality_enabled: bool = True
    verbose_progress: bool = False


@dataclass
class DataContext:
    """Ray Data's global settings, one per process (``DataContext.get_current()``)."""

    target_max_block_size: int | None = 128 * 1024 * 1024
    target_min_block_size: int = 1 * 1024 * 1024
    streaming_read_buffer_size: int = 32 * 1024 * 1024
    enable_pandas_block: bool = True
    use_push_based_shuffle: bool = False
    read_op_min_num_blocks: int = 200
    enable_tensor_extension_casting: bool = True
    enable_auto_log_stats: bool = False
    verbose_stats_logs: bool = False
    execution_options: ExecutionOptions = field(default_factory=ExecutionOptions)
    use_ray_tqdm: bool = True
    enable_progress_bars: bool = True
    enable_operator_progress_bars: bool = True
    enable_progress_bar_name_truncation: bool = True
    max_errored_blocks: int = 0
    log_internal_stack_trace_to_stdout: bool = False
    raise_original_map_exception: bool = False
    print_on_execution_start: bool = True
    actor_task_retry_on_errors: bool | list = False
    max_tasks_in_flight_per_actor: int | None = None
    wait_for_min_actors_s: int = -1

    @staticmethod
    def get_current() -> "DataContext":
        """This process's context, made on first use.

        Returns:
            DataContext: the same object on every call in a process (until ``_set_current``).
        """
        global _current
        with _lock:
            if _current is None:
                _current = DataContext()
            return _current

    @staticmethod
    def _set_current(context: "DataContext") -> None:
        global _current
        with _lock:
            _current = context

    def copy(self) -> "DataContext":
        """A deep copy of these settings."""
        return copy.deepcopy(self)

    def set_config(self, key: str, value) -> None:
        """Set an extra setting ``key`` (Ray's plugin configuration)."""
        self._kv_configs[key] = value

    def get_config(self, key: str, default=None):
        """An extra setting set by ``set_config``, or ``default``."""
        return self._kv_configs.get(key, default)

    def remove_config(self, key: str) -> None:
        """Forget the extra setting ``key``."""
        self._kv_configs.pop(key, None)

    def __post_init__(self) -> None:
        self._kv_configs: dict = {}


_current: DataContext | None = None
_lock = threading.Lock()

# Ray's older name for the same class.
DatasetContext = DataContext

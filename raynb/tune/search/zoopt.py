"""Zeroth-order optimization with ZOOpt (Ray Tune's ``ZOOptSearch``): Asynchronous
Sequential RAndomized COordinate Shrinking (ASRacos), zoopt's ``SRacosTune``, which
suggests a ``Solution`` and is told its value (``complete``) when the trial ends.
"""

from __future__ import annotations

from .library_searcher import LibrarySearcher, import_library, unsupported
from .sample import Categorical, Domain, Float, Integer
from .searcher import Searcher


def _zoopt():
    return import_library("zoopt", "ZOOptSearch", "zoopt")


def to_dim_dict(leaves: dict) -> dict:
    """Flat ``{key: Domain}`` -> zoopt's ``{key: (ValueType, range, precision | ordered)}``.

    Raises:
        ValueError: a log-scale range, randn, grid_search or sample_from, naming the key.
    """
    vt = _zoopt().ValueType
    dims = {}
    for key, leaf in leaves.items():
        if isinstance(leaf, Float) and not leaf.log:
            dims[key] = (vt.CONTINUOUS, [leaf.lower, leaf.upper], leaf.q or 1e-12)
        elif isinstance(leaf, Integer) and not leaf.log and leaf.q is None:
            dims[key] = (vt.DISCRETE, [leaf.lower, leaf.upper - 1], True)
        elif isinstance(leaf, Categorical) and not any(isinstance(c, Domain) for c in leaf.categories):
            dims[key] = (vt.GRID, list(leaf.categories))
        else:
            raise unsupported("ZOOptSearch", key, leaf)
    return dims


def _is_dim_dict(space) -> bool:
    vt = _zoopt().ValueType
    return bool(space) and all(isinstance(v, tuple) and v and isinstance(v[0], vt) for v in space.values())


class ZOOptSearch(LibrarySearcher):
    """Suggest configs with ZOOpt's ASRacos.

    Args:
        algo ("asracos" | "sracos"): the algorithm (both are zoopt's ``SRacosTune``).
        budget (int): how many samples zoopt may take (required, as in Ray).
        dim_dict (dict | None): zoopt dimensions ``{key: (ValueType.CONTINUOUS, [lo, hi],
            precision)}`` / ``(ValueType.DISCRETE, [lo, hi], ordered)`` /
            ``(ValueType.GRID, values)``, or a tune space (uniform, quniform, randint,
            choice); None takes the Tuner's ``param_space``.
        metric (str | None), mode ("min" | "max" | None): the objective.
        points_to_evaluate (list[dict] | None): full configs zoopt starts from.
        parallel_num (int): how many suggestions may be live at once.
        kwargs: more ``SRacosTune`` arguments.

    Raises:
        ImportError: zoopt is not installed. ValueError: no budget, an unknown algo, an
        unsupported domain.
    """

    _space_arg = "dim_dict"

    def __init__(
        self,
        algo: str = "asracos",
        budget: int | None = None,
        dim_dict: dict | None = None,
        metric: str | None = None,
        mode: str | None = None,
        points_to_evaluate: list[dict] | None = None,
        parallel_num: int = 1,
        **kwargs,
    ):
        _zoopt()
        if budget is None:
            raise ValueError("ZOOptSearch needs budget= (how many samples zoopt may take)")
        if algo.lower() not in ("asracos", "sracos"):
            raise ValueError(f"ZOOptSearch(algo={algo!r}): use 'asracos' or 'sracos'")
        self._dims: dict = {}
        super().__init__(dim_dict, metric, mode, None)
        self._init_points = list(points_to_evaluate or [])
        self._budget, self.parallel_num, self.kwargs = budget, parallel_num, kwargs
        self.optimizer = None
        self.best_solution_list: list = []

    def _set_space(self, space) -> None:
        if _is_dim_dict(space):
            self._dims, self._space = dict(space), space
            self._leaves = dict.fromkeys(space)
            return
        super()._set_space(space)

    def _build(self, leaves: dict) -> None:
        zoopt = _zoopt()
        from zoopt.algos.opt_algorithms.racos.sracos import SRacosTune

        self._dims = self._dims or to_dim_dict(leaves)
        keys = list(self._dims)
        init = [zoopt.Solution(x=tuple(p[k] for k in keys)) for p in self._init_points] or None
        parameter = zoopt.Parameter(budget=self._budget, init_samples=init)
        dimension = zoopt.Dimension2([self._dims[k] for k in keys])
        self.optimizer = SRacosTune(
            dimension=dimension, parameter=parameter, parallel_num=self.parallel_num, **self.kwargs
        )

    def _ask(self):
        opt = self.optimizer
        solution = opt.suggest()
        if solution is None and opt.complete_num >= opt._parameter.get_train_size():
            # SRacosTune closes its gate once its first samples are all out and reopens it
            # when the last of them completes; when they completed first (trials one at a
            # time) nothing reopens it
            opt.semaphore = 1
            solution = opt.suggest()
        if isinstance(solution, str) and solution == "FINISHED":
            return Searcher.FINISHED
        if solution is None:
            return None
        config = {k: (v.item() if hasattr(v, "item") else v) for k, v in zip(self._dims, solution.get_x())}
        return solution, config

    def _tell(self, solution, loss: float | None) -> None:
        if loss is None:
            return  # zoopt has no "failed" value: the solution is not told
        best = self.optimizer.complete(solution, loss)
        if best:
            self.best_solution_list.append(best)

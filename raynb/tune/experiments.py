"""Ray Tune's oldest interface: ``tune.Experiment`` specs run by ``tune.run_experiments``.

Each experiment is one ``tune.run`` (see :mod:`raynb.tune.legacy`) with the spec's
arguments; ``run`` may name a trainable given to ``tune.register_trainable``.
"""

from __future__ import annotations

_SPEC_KEYS = (
    "stop",
    "time_budget_s",
    "config",
    "resources_per_trial",
    "num_samples",
    "storage_path",
    "checkpoint_config",
    "max_failures",
    "trial_name_creator",
    "trial_dirname_creator",
)


class Experiment:
    """One experiment's spec (Ray's ``tune.Experiment``).

    Args:
        name (str): the experiment's name (its folder under the storage path).
        run (callable | str): the trainable, or a name given to ``register_trainable``.
        stop, time_budget_s, config, resources_per_trial, num_samples, storage_path,
        checkpoint_config, max_failures, trial_name_creator, trial_dirname_creator: as
            in ``tune.run``.

    Raises:
        TypeError: a spec key ``tune.run`` does not take (naming it).
    """

    def __init__(self, name: str, run, **spec):
        unknown = sorted(set(spec) - set(_SPEC_KEYS))
        if unknown:
            raise TypeError(f"Experiment({name!r}): unknown arguments {unknown}; known: {list(_SPEC_KEYS)}")
        self.name, self.run, self.spec = name, run, spec

    @classmethod
    def from_json(cls, name: str, spec: dict) -> "Experiment":
        """An Experiment from Ray's dict form ``{"run": ..., "config": ..., ...}``."""
        spec = dict(spec)
        if "run" not in spec:
            raise ValueError(f"experiment {name!r}: the spec needs 'run' (a trainable or a registered name)")
        return cls(name, spec.pop("run"), **spec)


def _as_experiments(experiments) -> list[Experiment]:
    if isinstance(experiments, Experiment):
        return [experiments]
    if isinstance(experiments, dict):
        return [Experiment.from_json(n, s) for n, s in experiments.items()]
    if isinstance(experiments, (list, tuple)) and all(isinstance(e, Experiment) for e in experiments):
        return list(experiments)
    raise TypeError(
        "run_experiments takes an Experiment, a list of them, or a dict {name: spec}, "
        f"got {type(experiments).__name__}"
    )


def run_experiments(
    experiments,
    scheduler=None,
    verbose=None,
    progress_reporter=None,
    raise_on_failed_trial: bool = True,
    concurrent: bool = True,
    callbacks=None,
    **ray_only,
) -> list:
    """Run each experiment in turn with ``tune.run`` and return all their trials.

    Returns:
        list[Trial]: the trials of every experiment, in order.

    Raises:
        TypeError / ValueError: a malformed experiment spec. TuneError: a failed trial
        when ``raise_on_failed_trial``.
    """
    from .legacy import run

    trials = []
    for exp in _as_experiments(experiments):
        analysis = run(
            exp.run,
            name=exp.name,
            scheduler=scheduler,
            verbose=verbose,
            progress_reporter=progress_reporter,
            raise_on_failed_trial=raise_on_failed_trial,
            callbacks=callbacks,
            **exp.spec,
        )
        trials.extend(analysis.trials)
    return trials

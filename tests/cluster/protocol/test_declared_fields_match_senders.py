"""What the head really sends a client on a run's path holds only fields the protocol's
catalog declares for its type (a comment beside a constant once said ``run_done`` carries
``error`` while the head sent ``errors``): a run on the shared cluster, its messages read as
the client's session verified them."""

from __future__ import annotations

import raynb
from raynb.cluster.protocol import catalog

DECLARED = {m.name: {f.name for f in m.fields} for m in catalog.MESSAGES}


def _report_once():
    from raynb.train import report

    report({"x": 1})
    return 7


def test_every_field_the_head_sends_on_a_runs_path_is_declared(warm):
    session, seen = warm.session, []
    accept = session.accept

    def recording(frames, identity=None):
        msg = accept(frames, identity)
        if msg is not None:
            seen.append((msg.msg_type, set(msg.content)))
        return msg

    session.accept = recording
    try:
        result = raynb.TorchTrainer(
            _report_once,
            scaling_config=raynb.ScalingConfig(num_workers=2),
            run_config=raynb.RunConfig(verbose=0),
        ).fit()
    finally:
        del session.accept
    assert result.metrics["x"] == 1
    types = {t for t, _ in seen}
    assert {"run_accepted", "run_done"} <= types, types
    undeclared = {t: sorted(keys - DECLARED[t]) for t, keys in seen if keys - DECLARED[t]}
    assert not undeclared, f"fields the head sends but catalog.py does not declare: {undeclared}"

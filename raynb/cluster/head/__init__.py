"""The head: one per cluster.

- ``server``: the socket loop, verification and dispatch of messages to handlers;
- ``registry``: nodes, workers, their resources and process groups;
- ``pool``: the warm count, retiring idle extra workers, thread shares, not responding;
- ``scheduler``: pure placement of a run's ranks on a registry snapshot;
- ``controller``: one run's state machine, with the failure policy injected;
- ``store``: run records, reports, logs and checkpoint commits on disk;
- ``uploads``: committed checkpoints copied to an object-store URI, in a thread of its own;
- ``local_node``: the node agent a local cluster's head starts and restarts;
- ``main``: ``python -m raynb.cluster.head``.
"""

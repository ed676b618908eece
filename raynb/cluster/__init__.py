"""The long-lived processes of a raynb cluster, and what they share.

``head/`` (one per cluster: registry, scheduler, run controllers, run store),
``node`` (one agent per machine) with its ``zygote`` (a fork server that imported
torch once) and the ``worker`` processes it forks; ``launch/`` is how they come to
exist. ``protocol`` (every message, signed), ``connection`` (the connection file),
``control`` (a request/reply connection to a head), ``rundir`` and ``checkpoints``
(the run directory on disk) and ``task_context`` (what a worker hands the function
it runs) are shared by them and by the client.

Nothing here imports ``raynb.client``, ``raynb.notebook``, ``raynb.train`` or
``raynb.tune`` (see CONTRIBUTING.md).
"""

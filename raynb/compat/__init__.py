"""Ray's module names served by raynb: ``import ray`` in a script or notebook runs on raynb.

``raynb run SCRIPT [ARGS...]`` runs an unchanged Ray Train / Tune / Data script with this
installed; in a notebook, one line before the first ``import ray`` cell::

    import raynb.compat; raynb.compat.install()

After it, ``ray``, ``ray.train``, ``ray.tune``, ``ray.data``, ``ray.air`` and their submodules
are raynb's (``ray.X.Y`` is ``raynb.X.Y``); what raynb does not serve (Ray core's
``ray.remote``, ``ray.get``, actors, Serve, RLlib, ``ray.util``) raises ``AttributeError`` /
``ImportError`` where it is used, naming it. Real Ray, installed or not, is untouched on disk.
See docs/coming-from-ray.md.
"""
from .ray_shim import install, installed, uninstall

__all__ = ["install", "uninstall", "installed", "load_ipython_extension"]


def load_ipython_extension(ipython) -> None:  # noqa: ARG001 - IPython's signature
    """``%load_ext raynb.compat``: the same as :func:`install` for the notebook's kernel."""
    install()

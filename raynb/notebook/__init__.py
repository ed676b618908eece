"""The notebook experience: the magics (``%%ray_train``, ``%%ray_tune``,
``%ray_cluster``, ``%ray_attach``), the progress data of a run and of a Tune
experiment, and their views (ipywidgets in Jupyter, text elsewhere).

Importing this package registers its views with ``raynb.client.views``, which is
how ``raynb.train`` and ``raynb.tune`` display anything without importing it.
"""

from ..client import views as _views
from .display import make_run_view, make_tune_view

_views.register(make_run_view, make_tune_view)


def _show(obj) -> None:
    from IPython.display import display

    display(obj)


_views.register_show(_show)


def load_ipython_extension(ipython) -> None:
    """``%load_ext raynb``: registers ``%%ray_train``, ``%%ray_tune``, ``%ray_cluster``
    and ``%ray_attach``."""
    from .magics.ray_train import RayNBMagics
    from .magics.ray_tune import RayTuneMagics

    ipython.register_magics(RayNBMagics)
    ipython.register_magics(RayTuneMagics)

"""The repository's pytest plugins, loaded for every run from this checkout (``pytest
tests/``, ``pytest --nbval-lax notebooks/`` and README's command, which runs both).

``tests.support.notebook_clusters`` gives each notebook nbval runs a cluster of its own.
It lives under ``tests/`` rather than beside the notebooks so that ``notebooks/`` holds
only notebooks. This file has no hooks of its own: ``tests/conftest.py`` is the tests'
(``from conftest import ...`` in a test module is that one's, loaded after this).
"""

pytest_plugins = ["tests.support.notebook_clusters"]

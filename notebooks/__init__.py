"""Example notebooks (a package only so that pytest imports notebooks/conftest.py
as ``notebooks.conftest``, apart from tests/conftest.py)."""

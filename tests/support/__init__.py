"""Helpers shared by the tests and the benchmarks (importable as ``tests.support``)."""

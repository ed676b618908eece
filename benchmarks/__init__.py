"""The benchmark scripts, each run from the repository's root as a module
(``python -m benchmarks.rerun_latency``): this package, its helpers (``_common``) and the
tests' shared fixtures (``tests.support``) import from there, with no ``sys.path`` edits."""

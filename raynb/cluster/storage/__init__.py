"""Run directories on disk: records, logs, progress tables, checkpoints and their streams."""

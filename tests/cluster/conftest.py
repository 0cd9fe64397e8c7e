"""Tests of pipeframe beyond one embedded session: a standalone cluster, Spark Connect, an S3 warehouse.

Every test here runs pipeframe in child processes (the CLI, or a worker script): the xdist worker that runs
these files also holds the shared embedded session of tests/spark, which a different get_session would stop.
Every server a test starts listens on 127.0.0.1 and is stopped by the fixture that started it.
Run them alone with `python -m pytest -m cluster` (or `-m connect`, `-m s3`).
"""

"""`ingest:` in pipeframe.yaml: the group-commit and materializer settings, with defaults, per environment, and a
clear PF002 for anything else."""

from __future__ import annotations

import pytest

from pipeframe.config import IngestSettings, load_config
from pipeframe.errors import PipeframeError


def test_defaults_and_overrides_per_environment(tmp_path):
    (tmp_path / "pipeframe.yaml").write_text("ingest:\n  flush_ms: 200\nenvironments:\n  prod:\n"
                                             "    ingest: {buffer_bytes: 1000}\n")
    assert load_config(tmp_path, environ={}).ingest == IngestSettings(flush_ms=200)
    assert load_config(tmp_path, "prod", environ={}).ingest == IngestSettings(flush_ms=200, buffer_bytes=1000)
    assert load_config(tmp_path / "missing", environ={}).ingest == IngestSettings()
    assert IngestSettings().direct_commit is True
    (tmp_path / "pipeframe.yaml").write_text("ingest:\n  direct_commit: false\n")
    assert load_config(tmp_path, environ={}).ingest == IngestSettings(direct_commit=False)


@pytest.mark.parametrize("text, words", [
    ("ingest: 5\n", "`ingest` must be a mapping"),
    ("ingest: {flush_secs: 1}\n", "Unknown ingest setting flush_secs"),
    ("ingest: {flush_ms: -1}\n", "`ingest.flush_ms` must be a positive whole number"),
    ("ingest: {flush_rows: 1.5}\n", "`ingest.flush_rows` must be a positive whole number"),
    ("ingest: {poll_ms: true}\n", "`ingest.poll_ms` must be a positive whole number"),
    ("ingest: {direct_commit: 1}\n", "`ingest.direct_commit` must be true or false"),
    ("ingest: {direct_commit: 'no'}\n", "`ingest.direct_commit` must be true or false"),
])
def test_bad_settings_name_the_key_and_the_fix(tmp_path, text, words):
    (tmp_path / "pipeframe.yaml").write_text(text)
    with pytest.raises(PipeframeError) as err:
        load_config(tmp_path, environ={})
    [diagnostic] = err.value.diagnostics
    assert diagnostic.code == "PF002" and words in diagnostic.message and "flush_rows" in diagnostic.hint


def test_spark_nice_is_from_0_to_19(tmp_path):
    """How much nicer than the serving process its Spark JVM's threads run (session.yield_cpu): 10 unless set, 0
    keeps them equal; anything else names the range."""
    assert IngestSettings().spark_nice == 10
    (tmp_path / "pipeframe.yaml").write_text("ingest: {spark_nice: 0}\n")
    assert load_config(tmp_path, environ={}).ingest == IngestSettings(spark_nice=0)
    assert load_config(tmp_path, environ={"PIPEFRAME_SPARK_NICE": "7"}).ingest == IngestSettings(spark_nice=7)
    (tmp_path / "pipeframe.yaml").write_text("ingest: {spark_nice: 0}\n")
    with pytest.raises(PipeframeError, match="from 0 to 19, not `high`"):
        load_config(tmp_path, environ={"PIPEFRAME_SPARK_NICE": "high"})
    for bad in ("20", "-1", "true", "2.5", "'5'"):
        (tmp_path / "pipeframe.yaml").write_text(f"ingest: {{spark_nice: {bad}}}\n")
        with pytest.raises(PipeframeError) as err:
            load_config(tmp_path, environ={})
        [diagnostic] = err.value.diagnostics
        assert diagnostic.code == "PF002" and "`ingest.spark_nice` must be a whole number from 0 to 19" in \
            diagnostic.message and "spark_nice: 10" in diagnostic.hint, bad

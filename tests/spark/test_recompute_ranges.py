"""The range a recompute narrows its source by (engine/recompute.py, `maintenance.key_range`) keeps every source row
of the touched groups, in any session time zone, across the days the clocks change: for each kind of group key a
view can record, every row of a year sampled every 10 minutes passes the range of its own key, and the range of the
touched keys' literal bounds (as the engine computes them from the keys brought to the driver); and a few touched
keys matched as literals (`_as_literals`) keep the rows a join with them keeps."""

from __future__ import annotations

import pytest

from pipeframe.compiler.maintenance import GroupKey, key_range
from pipeframe.engine.recompute import LITERAL_KEYS, _as_literals, literal_bounds

ZONES = ("UTC", "America/New_York", "Australia/Lord_Howe", "Asia/Kolkata")  # Lord Howe moves its clocks 30 minutes
KEYS = (
    GroupKey("k", "`ts`", "ts", "TIMESTAMP", None),
    GroupKey("k", "DATE_TRUNC('MINUTE', `ts`)", "ts", "TIMESTAMP", "MINUTE"),
    GroupKey("k", "DATE_TRUNC('HOUR', `ts`)", "ts", "TIMESTAMP", "HOUR"),
    GroupKey("k", "DATE_TRUNC('DAY', `ts`)", "ts", "TIMESTAMP", "DAY"),
    GroupKey("k", "CAST(`ts` AS DATE)", "ts", "TIMESTAMP", "DAY"),
    GroupKey("k", "CAST(DATE_TRUNC('HOUR', `ts`) AS DATE)", "ts", "TIMESTAMP", "DAY"),
    GroupKey("k", "DATE_TRUNC('WEEK', `ts`)", "ts", "TIMESTAMP", "WEEK"),
    GroupKey("k", "CAST(DATE_TRUNC('MONTH', `ts`) AS DATE)", "ts", "TIMESTAMP", "MONTH"),
    GroupKey("k", "DATE_TRUNC('QUARTER', `ts`)", "ts", "TIMESTAMP", "QUARTER"),
    GroupKey("k", "DATE_TRUNC('YEAR', `ts`)", "ts", "TIMESTAMP", "YEAR"),
    GroupKey("k", "`d`", "d", "DATE", None),
    GroupKey("k", "CAST(`d` AS DATE)", "d", "DATE", "DAY"),
    GroupKey("k", "DATE_TRUNC('WEEK', `d`)", "d", "DATE", "WEEK"),
    GroupKey("k", "DATE_TRUNC('HOUR', `d`)", "d", "DATE", "HOUR"),
    GroupKey("k", "CAST(DATE_TRUNC('MONTH', `d`) AS DATE)", "d", "DATE", "MONTH"),
    GroupKey("k", "`n`", "n", "INT", None),
)


@pytest.mark.parametrize("zone", ZONES)
def test_every_row_of_a_touched_group_lies_in_its_range(spark, zone):
    before = spark.conf.get("spark.sql.session.timeZone")
    spark.conf.set("spark.sql.session.timeZone", zone)
    try:
        rows = spark.sql("SELECT ts, CAST(ts AS DATE) AS d, CAST(unix_seconds(ts) % 997 AS INT) - 500 AS n FROM "
                         "(SELECT explode(sequence(TIMESTAMP '2024-01-01 00:05:00', TIMESTAMP '2025-01-02 00:00:00', "
                         "INTERVAL 10 MINUTES)) AS ts)")
        rows.createOrReplaceTempView("__pf_range_rows")
        for key in KEYS:
            keyed = f"(SELECT *, {key.sql} AS __k FROM __pf_range_rows)"
            own = key_range(key, "__k", "__k")
            assert own is not None, key
            [[outside]] = spark.sql(f"SELECT count(*) FROM {keyed} WHERE NOT ({own})").collect()
            assert outside == 0, (zone, key, own)
            # a few touched keys, their bounds as the engine writes them: every row of their groups passes
            touched = spark.sql(f"SELECT DISTINCT __k AS k FROM {keyed} WHERE d IN (DATE '2024-03-10', "
                                "DATE '2024-04-07', DATE '2024-10-06', DATE '2024-11-03') OR n = 7").toArrow()
            low, high = literal_bounds(touched.column("k"))
            spark.createDataFrame(touched).createOrReplaceTempView("__pf_range_keys")
            found = key_range(key, low, high)
            [[outside, inside]] = spark.sql(
                f"SELECT count_if(NOT ({found})), count(*) FROM {keyed} WHERE __k IN (SELECT k FROM __pf_range_keys)"
            ).collect()
            assert inside > 0 and outside == 0, (zone, key, found)
            # up to LITERAL_KEYS touched keys matched as literals keep the rows a join with them keeps
            few = touched.slice(0, LITERAL_KEYS)
            literals = _as_literals((key,), few)
            assert literals is not None and len(literals) == few.num_rows, key
            spark.createDataFrame(few).createOrReplaceTempView("__pf_range_keys")
            [[by_literals, by_join]] = spark.sql(
                f"SELECT count_if(__k IN ({', '.join(literals)})), count_if(__k IN (SELECT k FROM __pf_range_keys)) "
                f"FROM {keyed}").collect()
            assert by_literals == by_join > 0, (zone, key, literals[:3])
    finally:
        spark.conf.set("spark.sql.session.timeZone", before)
        spark.catalog.dropTempView("__pf_range_rows")
        spark.catalog.dropTempView("__pf_range_keys")

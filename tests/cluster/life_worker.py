"""The example project's life in one driver process (one Spark session), on whatever master the environment names.

Usage: python tests/cluster/life_worker.py PROJECT_COPY OUT_JSON
  (PIPEFRAME_SPARK_MASTER=spark://127.0.0.1:P in the environment for a standalone cluster)

Runs through the `pipeframe.Project` API: deploy; append the fixtures; the project's own endpoint tests
(example_project/tests/*.yaml, answers computed on local[*] from the fixtures); rows appended without their views,
then `refresh`; `populate --truncate`; `optimize` of sales_by_hour; a change to sales_by_hour's query that forces a rebuild (of it
and of the cascading sales_by_day). After each step the answers are compared with values computed in Python from
the rows appended. Writes what it saw to OUT_JSON (failures as a list of sentences, the session's master, its
executors) and exits 0 even when an answer differs: the test reads the JSON and reports every difference at once.
A PipeframeError is printed as its diagnostics (exit 1), as the CLI would.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

from pipeframe.errors import PipeframeError
from pipeframe.project import Project
from tests.cluster.shop import UNITS_COLUMN, Life, expected_top_products, expected_units, sample_sales


def main() -> int:
    root, out = Path(sys.argv[1]), Path(sys.argv[2])
    life = Life()
    seen, check, top_products = life.seen, life.check, life.top_products
    try:
        project = Project(root)
        result = project.deploy()
        seen["deploy_changes"] = result.changes
        rows = life.load_fixtures(project, root)

        more = sample_sales()
        project.append("sales", [json.dumps(r) for r in more], views=False)  # landed, views not yet applied
        rows += more
        lag = {s.name: s.lag_versions for s in project.status("sales_by_hour")}
        seen["lag_before_refresh"] = lag
        refreshed = project.refresh()
        seen["refreshed"] = sorted(r.view for r in refreshed)
        check("refresh: top_products", top_products(project), expected_top_products(rows))

        project.populate("sales_by_hour", truncate=True)
        check("populate: top_products", top_products(project), expected_top_products(rows))

        seen["optimized"] = project.optimize("sales_by_hour")
        check("optimize: top_products", top_products(project), expected_top_products(rows))

        pipe = root / "pipes" / "sales_by_hour.pipe"
        pipe.write_text(pipe.read_text().replace("max(amount) AS max_ticket",
                                                 f"max(amount) AS max_ticket,\n        sum(quantity) AS {UNITS_COLUMN}"))
        project = project.reload()
        seen["rebuild_plan"] = {c.name: c.action for c in project.plan().pending}
        project.deploy()
        check("rebuild: top_products", top_products(project), expected_top_products(rows))
        units = project.query(f"SELECT product, sum({UNITS_COLUMN}) AS units FROM sales_by_hour GROUP BY product")
        check("rebuild: units", {r["product"]: r["units"] for r in units.collect()}, expected_units(rows))
        states = {s.name: s.status for s in project.status()}
        seen["status"] = states

        spark = project.spark
        context = spark.sparkContext
        seen["master"] = context.master
        seen["app_id"] = context.applicationId
        seen["app_name"] = context.appName
        # The block managers the driver knows: its own and one per executor.
        seen["executors"] = context._jsc.sc().getExecutorMemoryStatus().size() - 1
        seen["jars"] = context.getConf().get("spark.jars", "")
    except PipeframeError as err:
        for diagnostic in err.diagnostics:
            print(diagnostic.format(), flush=True)
        return 1
    seen["failures"] = life.failures
    out.write_text(json.dumps(seen, indent=2, default=str))
    return 0


if __name__ == "__main__":
    sys.exit(main())

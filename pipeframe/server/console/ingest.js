// Ingest figures per datasource (GET /v0/ingest): rows per second over the last minute, with a bar against the
// busiest datasource, and the counters since the server started.

import { api } from "./api.js";
import { errorNote, fill, h, number } from "./dom.js";

export async function showIngest() {
  const container = document.getElementById("ingest-table");
  try {
    const { datasources } = await api("/v0/ingest");
    const entries = Object.entries(datasources);
    if (!entries.length) {
      fill(container, h("p", { class: "empty" }, "Nothing ingested through this server yet (POST /v0/events)."));
      return;
    }
    const busiest = Math.max(1, ...entries.map(([, s]) => s.rows_per_second));
    fill(container, h("table", { class: "rows" },
      h("thead", {}, h("tr", {}, ["datasource", "rows/s (last minute)", "", "rows", "requests", "commits",
        "quarantined", "rejected (429)", "failed", "buffered", "last commit"].map((c) => h("th", {}, c)))),
      h("tbody", {}, entries.map(([name, s]) => h("tr", { "data-datasource": name },
        h("td", {}, h("strong", {}, name)),
        h("td", { class: "num" }, number(s.rows_per_second, 1)),
        h("td", {}, h("div", { class: "rate" }, bar((100 * s.rows_per_second) / busiest))),
        h("td", { class: "num" }, number(s.rows)),
        h("td", { class: "num" }, number(s.requests)),
        h("td", { class: "num" }, number(s.commits)),
        h("td", { class: "num" }, number(s.quarantined_rows)),
        h("td", { class: "num" }, number(s.rejected_requests)),
        h("td", { class: "num" }, number(s.failed_requests)),
        h("td", { class: "num" }, `${number(s.buffered_requests)} req · ${number(s.buffered_bytes)} B`),
        h("td", {}, s.last_commit_version === null ? "–"
          : `v${s.last_commit_version} in ${number(s.last_commit_ms, 1)} ms`))))));
  } catch (err) {
    fill(container, errorNote(err));
  }
}

// A rate's bar, `percent` wide (set through the style property: the console's CSP allows no style attribute).
function bar(percent) {
  const el = h("div");
  el.style.width = `${percent}%`;
  return el;
}

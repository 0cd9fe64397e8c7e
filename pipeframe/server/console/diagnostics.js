// Under `pipeframe dev`: the last compile's errors and warnings (GET /v0/dev/diagnostics), as `pipeframe check`
// prints them. Other servers have no such route, and the tab stays hidden.

import { ApiError, api } from "./api.js";
import { errorNote, fill, h } from "./dom.js";

export async function hasDiagnostics() {
  try {
    await api("/v0/dev/diagnostics");
    return true;
  } catch (err) {
    return !(err instanceof ApiError && err.status === 404);
  }
}

function item(d) {
  const where = d.file ? `${d.file}:${d.line ?? "?"}:${d.col ?? "?"}` : "";
  return h("li", { class: d.severity },
    h("div", {}, h("span", { class: `badge ${d.severity}` }, d.severity), " ", h("code", {}, d.code), " ",
      h("span", { class: "where" }, where)),
    h("div", {}, d.message), d.hint ? h("div", { class: "hint" }, `fix: ${d.hint}`) : null);
}

export async function showDiagnostics() {
  const container = document.getElementById("diagnostics-list");
  try {
    const report = await api("/v0/dev/diagnostics");
    const when = report.compiled_at ? `compiled at ${report.compiled_at.replace("T", " ").slice(0, 19)} UTC` : "not compiled yet";
    fill(container,
      h("p", { class: report.ok ? "ok" : "error" }, report.ok ? "✓ no errors" : `✗ ${report.errors} error(s)`,
        `, ${report.warnings} warning(s), ${when}`),
      report.diagnostics.length ? h("ul", { class: "diagnostics" }, report.diagnostics.map(item)) : null);
  } catch (err) {
    fill(container, errorNote(err));
  }
}

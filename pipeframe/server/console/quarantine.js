// The quarantine browser: the rows that did not fit a landing datasource (GET /v0/datasources/{name}/quarantine),
// newest first, with the reason each was refused.

import { api } from "./api.js";
import { errorNote, fill, h, rowsTable } from "./dom.js";

const LIMIT = 100;

async function landingDatasources() {
  const { nodes } = await api("/v0/graph");
  return nodes.filter((n) => n.kind === "datasource").map((n) => n.name);
}

export async function showQuarantine() {
  const container = document.getElementById("quarantine-rows");
  const picker = document.getElementById("quarantine-datasource");
  try {
    const names = await landingDatasources();
    const chosen = names.includes(picker.value) ? picker.value : names[0];
    fill(picker, ...names.map((n) => h("option", { value: n, selected: n === chosen }, n)));
    if (!chosen) {
      fill(container, h("p", { class: "empty" }, "The project has no landing datasource."));
      return;
    }
    const answer = await api(`/v0/datasources/${encodeURIComponent(chosen)}/quarantine?limit=${LIMIT}`);
    fill(container, answer.rows
      ? [h("p", { class: "hint" }, `${answer.rows} row(s) of ${chosen}_quarantine, newest first`
          + (answer.rows === LIMIT ? ` (the newest ${LIMIT})` : "")),
        rowsTable(answer.meta.map((m) => m.name), answer.data)]
      : h("p", { class: "empty" }, `Nothing quarantined in ${chosen}: every row fit its schema.`));
    container.dataset.datasource = chosen;
  } catch (err) {
    fill(container, errorNote(err));
  }
}

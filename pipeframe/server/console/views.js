// Each materialized view's status, lag, rows, last strategy and last error (GET /v0/views), with pause, resume and
// recover (PATCH /v0/views/{name}, POST /v0/views/{name}/recover).

import { api } from "./api.js";
import { errorNote, fill, h, number } from "./dom.js";
import { notify } from "./notice.js";

const ACTIONS = {
  pause: { label: "Pause", call: (name) => api(`/v0/views/${encodeURIComponent(name)}`, { method: "PATCH", body: { paused: true } }) },
  resume: { label: "Resume", call: (name) => api(`/v0/views/${encodeURIComponent(name)}`, { method: "PATCH", body: { paused: false } }) },
  recover: { label: "Recover", call: (name) => api(`/v0/views/${encodeURIComponent(name)}/recover`, { method: "POST" }) },
};

function lag(view) {
  if (view.lag_versions === null || view.lag_versions === undefined) return "–";
  const seconds = view.lag_seconds ? ` · ${number(view.lag_seconds, 1)} s` : "";
  return `${view.lag_versions} version${view.lag_versions === 1 ? "" : "s"}${seconds}`;
}

function button(action, view) {
  return h("button", { "data-action": action, onclick: () => run(action, view.name) }, ACTIONS[action].label);
}

function row(view) {
  const paused = view.status === "paused";
  const troubled = view.status === "error" || view.status === "stale";
  return h("tr", { "data-view": view.name, class: `status-${view.status}` },
    h("td", {}, h("strong", {}, view.name), view.pipe && view.pipe !== view.name ? h("div", { class: "hint" }, `pipe ${view.pipe}`) : null),
    h("td", { class: "status" }, h("span", { class: `badge ${view.status}` }, view.status)),
    h("td", {}, view.source || "–", h("div", { class: "hint" }, `v${view.applied_version ?? "–"} of v${view.source_version ?? "–"}`)),
    h("td", { class: "lag" }, lag(view)),
    h("td", { class: "num" }, number(view.rows)),
    h("td", {}, view.last_path || "–"),
    h("td", {}, view.last_refresh ? view.last_refresh.replace("T", " ").slice(0, 19) : "–"),
    h("td", { class: "reason" }, view.reason || ""),
    h("td", { class: "actions" }, paused ? button("resume", view) : button("pause", view),
      troubled ? button("recover", view) : null));
}

async function run(action, name) {
  const table = document.getElementById("views-table");
  table.setAttribute("aria-busy", "true");
  try {
    const answer = await ACTIONS[action].call(name);
    const refreshed = (answer.refresh || []).map((r) => `${r.view}: ${r.outcome}`).join(", ");
    notify(`${ACTIONS[action].label}: ${name} is ${answer.view.status}${refreshed ? ` (${refreshed})` : ""}.`);
  } catch (err) {
    notify(`${ACTIONS[action].label} ${name}: ${err.message}`, true);
  }
  await showViews();
}

export async function showViews() {
  const table = document.getElementById("views-table");
  try {
    const { views } = await api("/v0/views");
    fill(table, views.length ? h("table", { class: "rows" },
      h("thead", {}, h("tr", {}, ["view", "status", "source (applied)", "lag", "rows", "last strategy",
        "last refresh", "last error", ""].map((c) => h("th", {}, c)))),
      h("tbody", {}, views.map(row))) : h("p", { class: "empty" }, "The project has no materialized views."));
  } catch (err) {
    fill(table, errorNote(err));
  }
  table.removeAttribute("aria-busy");
}

// The endpoint playground, built from the OpenAPI document (GET /v0/openapi.json): pick an endpoint, fill in its
// declared parameters, run it, and read the rows as a table (and the answer as JSON).

import { api } from "./api.js";
import { errorNote, fill, h, number, rowsTable } from "./dom.js";

let endpoints = new Map(); // name → its OpenAPI operation (the .json path)

function field(parameter) {
  const schema = parameter.schema || {};
  const choices = schema.enum || schema.items?.enum;
  const common = { name: parameter.name, "data-param": parameter.name, required: parameter.required || null };
  let input;
  if (choices && schema.type !== "array") {
    input = h("select", common, h("option", { value: "" }, schema.default !== undefined ? `(${schema.default})` : ""),
      choices.map((c) => h("option", { value: c }, c)));
  } else if (schema.type === "boolean") {
    input = h("select", common, h("option", { value: "" }, ""), h("option", {}, "true"), h("option", {}, "false"));
  } else {
    const fallback = Array.isArray(schema.default) ? schema.default.join(",") : schema.default;
    input = h("input", { ...common, type: "text", placeholder: fallback ?? schema.example ?? "" });
  }
  return h("label", { class: "param" },
    h("span", {}, parameter.name, parameter.required ? h("em", {}, " required") : null,
      h("small", {}, ` ${parameter["x-pipeframe-type"] || schema.type || ""}`)),
    input, parameter.description ? h("small", { class: "hint" }, parameter.description) : null);
}

function chosen() {
  return endpoints.get(document.getElementById("pg-endpoint").value);
}

// The query string of what the form holds (empty fields are left out: the endpoint's defaults apply).
function query() {
  const params = new URLSearchParams();
  for (const input of document.querySelectorAll("#pg-params [data-param]")) {
    if (input.value !== "") params.append(input.dataset.param, input.value);
  }
  return params.toString();
}

function pick() {
  const operation = chosen();
  document.getElementById("pg-description").textContent = operation?.description || "";
  fill(document.getElementById("pg-params"), ...(operation?.parameters || []).map(field));
  fill(document.getElementById("pg-result"));
  showUrl();
}

function showUrl() {
  const name = document.getElementById("pg-endpoint").value;
  const q = query();
  document.getElementById("pg-url").textContent = name ? `GET /v0/pipes/${name}.json${q ? `?${q}` : ""}` : "";
}

async function run(event) {
  event.preventDefault();
  const name = document.getElementById("pg-endpoint").value;
  const result = document.getElementById("pg-result");
  result.setAttribute("aria-busy", "true");
  const q = query();
  try {
    const answer = await api(`/v0/pipes/${encodeURIComponent(name)}.json${q ? `?${q}` : ""}`);
    const stats = answer.statistics || {};
    fill(result,
      h("p", { class: "hint", id: "pg-stats" }, `${answer.rows} row(s) in ${number(stats.elapsed * 1000, 1)} ms`
        + ` · ${number(stats.rows_read)} rows read · ${stats.engine || ""}`),
      rowsTable(answer.meta.map((m) => m.name), answer.data),
      h("details", {}, h("summary", {}, "JSON"), h("pre", { id: "pg-json" }, JSON.stringify(answer, null, 2))));
    result.dataset.state = "done";
  } catch (err) {
    fill(result, errorNote(err));
    result.dataset.state = "error";
  }
  result.removeAttribute("aria-busy");
}

export async function showPlayground() {
  const picker = document.getElementById("pg-endpoint");
  const result = document.getElementById("pg-result");
  try {
    const doc = await api("/v0/openapi.json");
    endpoints = new Map(Object.entries(doc.paths)
      .filter(([path, item]) => path.startsWith("/v0/pipes/") && path.endsWith(".json") && item.get)
      .map(([path, item]) => [path.slice("/v0/pipes/".length, -".json".length), item.get]));
  } catch (err) {
    fill(result, errorNote(err));
    return;
  }
  const names = [...endpoints.keys()].sort();
  const previous = picker.value;
  fill(picker, ...names.map((n) => h("option", { value: n, selected: n === previous }, n)));
  if (!names.length) {
    fill(result, h("p", { class: "empty" }, "No endpoint this token may read."));
    return;
  }
  if (picker.value !== previous || !document.querySelector("#pg-params label")) pick();
}

export function initPlayground() {
  document.getElementById("pg-endpoint").addEventListener("change", pick);
  document.getElementById("pg-form").addEventListener("submit", run);
  document.getElementById("pg-params").addEventListener("input", showUrl);
}

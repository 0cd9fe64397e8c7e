// The console's shell: one tab per concern (the URL's #hash picks it), the token form, and the refresh buttons.
// Each tab fetches its data when shown.

import { setToken, token } from "./api.js";
import { hasDiagnostics, showDiagnostics } from "./diagnostics.js";
import { showGraph } from "./graph.js";
import { showIngest } from "./ingest.js";
import { showLatency } from "./latency.js";
import { clearNotice } from "./notice.js";
import { initPlayground, showPlayground } from "./playground.js";
import { showQuarantine } from "./quarantine.js";
import { showViews } from "./views.js";

const TABS = {
  graph: showGraph,
  views: showViews,
  ingest: showIngest,
  latency: showLatency,
  quarantine: showQuarantine,
  playground: showPlayground,
  diagnostics: showDiagnostics,
};

function current() {
  const name = location.hash.slice(1);
  return Object.hasOwn(TABS, name) ? name : "graph";
}

async function show() {
  const name = current();
  for (const section of document.querySelectorAll("main > section")) section.hidden = section.id !== name;
  for (const link of document.querySelectorAll("#tabs a")) {
    link.classList.toggle("active", link.getAttribute("href") === `#${name}`);
  }
  const section = document.getElementById(name);
  section.dataset.loaded = "false";
  await TABS[name]();
  section.dataset.loaded = "true"; // what a test waits for
}

async function revealDiagnostics() {
  document.querySelector('#tabs a[href="#diagnostics"]').hidden = !(await hasDiagnostics());
}

function init() {
  document.getElementById("token").value = token();
  document.getElementById("token-form").addEventListener("submit", (event) => {
    event.preventDefault();
    setToken(document.getElementById("token").value.trim());
    clearNotice();
    revealDiagnostics();
    show();
  });
  for (const button of document.querySelectorAll("button.refresh")) button.addEventListener("click", show);
  document.getElementById("quarantine-datasource").addEventListener("change", show);
  document.getElementById("latency-pipe").addEventListener("change", show);
  document.getElementById("latency-minutes").addEventListener("change", show);
  initPlayground();
  window.addEventListener("hashchange", () => {
    clearNotice();
    show();
  });
  revealDiagnostics();
  show();
}

init();

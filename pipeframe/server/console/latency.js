// Endpoint latency over time, from the request log of the service datasources (GET /v0/service/requests): p50 and
// p95 per minute of one endpoint as lines, its requests (and errors) as bars. A server without a request log
// answers 404: the chart says so.

import { ApiError, api } from "./api.js";
import { errorNote, fill, h, number, svg as s } from "./dom.js";

const W = 760, H = 300, LEFT = 56, RIGHT = 16, TOP = 16, BARS = 56, BOTTOM = 28;

function time(minute) {
  return Date.parse(minute.replace(" ", "T") + "Z");
}

export function chart(rows) {
  // At least a quarter of an hour wide, ending at the last minute: a lone minute is not stretched across the chart.
  const t1 = time(rows[rows.length - 1].minute) + 60_000, t0 = Math.min(time(rows[0].minute), t1 - 15 * 60_000);
  const top = Math.max(1, ...rows.map((r) => r.p95_ms ?? 0)) * 1.1;
  const busiest = Math.max(1, ...rows.map((r) => r.requests));
  const plotBottom = H - BOTTOM - BARS - 10;
  const x = (r) => LEFT + ((time(r.minute) - t0) / (t1 - t0)) * (W - LEFT - RIGHT);
  const y = (ms) => plotBottom - (ms / top) * (plotBottom - TOP);
  const svg = s("svg", { width: W, height: H, viewBox: `0 0 ${W} ${H}`, class: "chart", role: "img",
    "aria-label": "endpoint latency per minute" });
  for (const fraction of [0, 0.5, 1]) {
    const ms = top * fraction;
    svg.append(s("line", { x1: LEFT, x2: W - RIGHT, y1: y(ms), y2: y(ms), class: "grid" }),
      s("text", { x: LEFT - 6, y: y(ms) + 4, class: "tick", "text-anchor": "end" }, `${number(ms, 1)} ms`));
  }
  const barWidth = Math.max(2, Math.min(14, (W - LEFT - RIGHT) / Math.max(rows.length, 1) - 2));
  for (const r of rows) {
    const height = (r.requests / busiest) * BARS, failed = (r.errors / busiest) * BARS;
    const bar = s("g", { class: "bar" },
      s("rect", { x: x(r) - barWidth / 2, y: H - BOTTOM - height, width: barWidth, height, class: "requests" }),
      s("rect", { x: x(r) - barWidth / 2, y: H - BOTTOM - failed, width: barWidth, height: failed, class: "errors" }),
      s("title", {}, `${r.minute}: ${r.requests} requests, ${r.errors} errors`));
    svg.append(bar);
  }
  for (const [field, cls] of [["p95_ms", "p95"], ["p50_ms", "p50"]]) {
    const points = rows.filter((r) => r[field] !== null).map((r) => `${x(r)},${y(r[field])}`);
    svg.append(s("polyline", { points: points.join(" "), class: `line ${cls}` }));
    for (const r of rows.filter((row) => row[field] !== null)) {
      const dot = s("circle", { cx: x(r), cy: y(r[field]), r: 2.5, class: `dot ${cls}` });
      dot.append(s("title", {}, `${r.minute}: ${field.replace("_ms", "")} ${r[field]} ms`));
      svg.append(dot);
    }
  }
  svg.append(
    s("text", { x: LEFT, y: H - 8, class: "tick" }, `${new Date(t0).toISOString().slice(0, 16).replace("T", " ")} UTC`),
    s("text", { x: W - RIGHT, y: H - 8, class: "tick", "text-anchor": "end" }, rows[rows.length - 1].minute.slice(0, 16)),
    s("text", { x: LEFT - 6, y: H - BOTTOM - BARS / 2, class: "tick", "text-anchor": "end" }, "requests"),
    s("text", { x: LEFT - 6, y: H - BOTTOM - BARS / 2 + 13, class: "tick", "text-anchor": "end" }, `≤ ${busiest}/min`));
  return svg;
}

export async function showLatency() {
  const container = document.getElementById("latency-chart");
  const picker = document.getElementById("latency-pipe");
  const minutes = document.getElementById("latency-minutes").value;
  let data;
  try {
    ({ data } = await api(`/v0/service/requests?minutes=${encodeURIComponent(minutes)}`));
  } catch (err) {
    fill(container, err instanceof ApiError && err.status === 404
      ? h("p", { class: "empty", id: "no-request-log" }, "No request log: this server keeps no service datasources.")
      : errorNote(err));
    return;
  }
  const pipes = [...new Set(data.map((r) => r.pipe_name))].sort();
  const chosen = pipes.includes(picker.value) ? picker.value : pipes[0];
  fill(picker, ...pipes.map((p) => h("option", { value: p, selected: p === chosen }, p)));
  if (!pipes.length) {
    fill(container, h("p", { class: "empty" }, `No endpoint requests in the last ${minutes} minutes.`));
    return;
  }
  const rows = data.filter((r) => r.pipe_name === chosen).sort((a, b) => time(a.minute) - time(b.minute));
  const total = rows.reduce((sum, r) => sum + r.requests, 0);
  const errors = rows.reduce((sum, r) => sum + r.errors, 0);
  fill(container, h("p", { class: "hint" }, h("span", { class: "key line-key p50" }, "p50"),
    h("span", { class: "key line-key p95" }, "p95"),
    ` ${chosen}: ${number(total)} requests, ${number(errors)} errors in ${rows.length} minute(s)`), chart(rows));
}

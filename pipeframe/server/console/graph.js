// The project's graph (GET /v0/graph) drawn as SVG: one column per layer (a resource sits right of everything it
// reads), nodes ordered within a column by where their sources sit, edges styled by what they mean.

import { api } from "./api.js";
import { errorNote, fill, h, svg as s } from "./dom.js";

const NODE_W = 176, NODE_H = 46, GAP_X = 84, GAP_Y = 22, PAD = 24;

export const KINDS = {
  "datasource": "datasource",
  "view target": "view (target datasource)",
  "materialized": "materialized pipe",
  "endpoint": "endpoint",
  "copy": "copy pipe",
  "pipe": "pipe",
};
const RELATIONS = {
  triggers: "new rows trigger", lookup: "looked up (dimension)", writes: "writes", copies: "copies into",
  reads: "reads",
};

// Each node's column (longest path from a source) and row (ordered by the mean row of its sources).
export function layout(nodes, edges) {
  const sources = new Map(nodes.map((n) => [n.id, []]));
  for (const e of edges) sources.get(e.to)?.push(e.from);
  const column = new Map();
  for (const n of nodes) { // dependencies come first in the API's order
    column.set(n.id, Math.max(-1, ...sources.get(n.id).map((id) => column.get(id) ?? -1)) + 1);
  }
  const columns = [];
  for (const n of nodes) (columns[column.get(n.id)] ??= []).push(n);
  const row = new Map();
  for (const members of columns) {
    const weight = (n) => {
      const rows = sources.get(n.id).map((id) => row.get(id)).filter((r) => r !== undefined);
      return rows.length ? rows.reduce((a, b) => a + b, 0) / rows.length : Infinity;
    };
    members.map((n, i) => [n, weight(n), i]).sort((a, b) => a[1] - b[1] || a[2] - b[2])
      .forEach(([n], i) => row.set(n.id, i));
  }
  const tallest = Math.max(1, ...columns.map((c) => c.length));
  const place = new Map();
  for (const [c, members] of columns.entries()) {
    const offset = (tallest - members.length) * (NODE_H + GAP_Y) / 2; // each column centred vertically
    for (const n of members) {
      place.set(n.id, { x: PAD + c * (NODE_W + GAP_X), y: PAD + offset + row.get(n.id) * (NODE_H + GAP_Y) });
    }
  }
  return {
    place,
    width: PAD * 2 + columns.length * NODE_W + Math.max(0, columns.length - 1) * GAP_X,
    height: PAD * 2 + tallest * NODE_H + (tallest - 1) * GAP_Y,
  };
}

function edgePath(a, b) {
  const x1 = a.x + NODE_W, y1 = a.y + NODE_H / 2, x2 = b.x - 6, y2 = b.y + NODE_H / 2;
  const bend = Math.max(30, (x2 - x1) / 2);
  return `M${x1},${y1} C${x1 + bend},${y1} ${x2 - bend},${y2} ${x2},${y2}`;
}

export function drawGraph(graph) {
  const { place, width, height } = layout(graph.nodes, graph.edges);
  const svg = s("svg", { width, height, viewBox: `0 0 ${width} ${height}`, class: "graph", role: "img",
    "aria-label": "the project's graph" });
  svg.append(s("defs", {}, ...Object.keys(RELATIONS).map((r) =>
    s("marker", { id: `arrow-${r}`, viewBox: "0 0 10 10", refX: 9, refY: 5, markerWidth: 7, markerHeight: 7,
      orient: "auto-start-reverse", class: `arrow ${r}` }, s("path", { d: "M0,0 L10,5 L0,10 z" })))));
  for (const e of graph.edges) {
    const path = s("path", { d: edgePath(place.get(e.from), place.get(e.to)), class: `edge ${e.relation}`,
      "marker-end": `url(#arrow-${e.relation})`, "data-from": e.from, "data-to": e.to });
    path.append(s("title", {}, `${e.from} ${RELATIONS[e.relation]} ${e.to}`));
    svg.append(path);
  }
  for (const n of graph.nodes) {
    const { x, y } = place.get(n.id);
    const kind = n.kind.replace(" ", "-");
    const label = n.name.length > 22 ? `${n.name.slice(0, 21)}…` : n.name;
    svg.append(s("g", { class: `node ${kind}`, "data-id": n.id, "data-name": n.name, "data-kind": n.kind,
      transform: `translate(${x},${y})` },
    s("title", {}, `${n.name}: ${KINDS[n.kind] || n.kind}`),
    s("rect", { width: NODE_W, height: NODE_H, rx: n.kind.includes("datasource") || n.kind === "view target" ? 4 : 14 }),
    s("text", { x: 12, y: 19, class: "name" }, label),
    s("text", { x: 12, y: 36, class: "kind" }, KINDS[n.kind] || n.kind)));
  }
  return svg;
}

function legend() {
  return [
    ...Object.entries(KINDS).map(([kind, text]) => h("span", { class: `key node-key ${kind.replace(" ", "-")}` }, text)),
    ...Object.entries(RELATIONS).map(([relation, text]) => h("span", { class: `key edge-key ${relation}` }, text)),
  ];
}

export async function showGraph() {
  const canvas = document.getElementById("graph-canvas");
  fill(document.getElementById("graph-legend"), ...legend());
  try {
    const graph = await api("/v0/graph");
    fill(canvas, graph.nodes.length ? drawGraph(graph) : h("p", { class: "empty" }, "The project has no resources."));
  } catch (err) {
    fill(canvas, errorNote(err));
  }
}

// Small DOM helpers: build elements, tables of rows, and error notes.

// h("td", {class: "num"}, "12"): an element with attributes (on* as listeners) and children (text or nodes).
export function h(tag, attrs = {}, ...children) {
  const el = document.createElement(tag);
  for (const [key, value] of Object.entries(attrs)) {
    if (value === null || value === undefined || value === false) continue;
    if (key.startsWith("on")) el.addEventListener(key.slice(2), value);
    else el.setAttribute(key, value === true ? "" : value);
  }
  el.append(...children.flat().filter((c) => c !== null && c !== undefined).map((c) =>
    c instanceof Node ? c : document.createTextNode(String(c))));
  return el;
}

// svg("rect", {width: 10}): an SVG element with attributes and children.
export function svg(tag, attrs = {}, ...children) {
  const el = document.createElementNS("http://www.w3.org/2000/svg", tag);
  for (const [key, value] of Object.entries(attrs)) el.setAttribute(key, value);
  el.append(...children);
  return el;
}

// A cell's text: null as an empty cell, nested values as JSON.
export function cellText(value) {
  if (value === null || value === undefined) return "";
  return typeof value === "object" ? JSON.stringify(value) : String(value);
}

// A table of `rows` (objects) with `columns` (names), numbers aligned right.
export function rowsTable(columns, rows) {
  return h("table", { class: "rows" },
    h("thead", {}, h("tr", {}, columns.map((c) => h("th", {}, c)))),
    h("tbody", {}, rows.map((row) => h("tr", {}, columns.map((c) =>
      h("td", { class: typeof row[c] === "number" ? "num" : null }, cellText(row[c])))))));
}

// An API error shown where the data would be: the message, its code and the hint.
export function errorNote(err) {
  return h("div", { class: "error" },
    h("strong", {}, err.code ? `${err.code} ` : ""), err.message,
    err.hint ? h("div", { class: "hint" }, err.hint) : null);
}

// Replace what `container` shows with `children` (nodes, or arrays of nodes; null is skipped).
export function fill(container, ...children) {
  container.replaceChildren(...children.flat().filter((c) => c !== null && c !== undefined));
}

// 1234567 → "1,234,567"; a rate with one decimal.
export function number(value, digits = 0) {
  if (value === null || value === undefined) return "–";
  return Number(value).toLocaleString("en-US", { maximumFractionDigits: digits });
}

// Small DOM helpers and the canvas line chart; no framework.
export function el(tag, attrs = {}, ...kids) {
  const n = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (v === null || v === undefined || v === false) continue;
    if (k.startsWith("on")) n.addEventListener(k.slice(2), v);
    else if (k === "class") n.className = v;
    else if (k === "text") n.textContent = v;
    else if (k === "style") Object.assign(n.style, v);  // CSSOM: allowed by the console's CSP, attributes are not
    else n.setAttribute(k, v === true ? "" : v);
  }
  for (const kid of kids.flat()) if (kid !== null && kid !== undefined) n.append(kid);
  return n;
}

export function field(labelText, input) {
  const id = input.id || ("f" + Math.random().toString(36).slice(2, 8));
  input.id = id;
  return el("div", {}, el("label", { for: id, text: labelText }), input);
}

export function select(options, value) {
  const s = el("select");
  for (const o of options) s.append(el("option", { value: o, text: o, selected: o === value }));
  return s;
}

export function human(bytes) {
  if (bytes === null || bytes === undefined) return "-";
  const u = ["B", "KB", "MB", "GB"];
  let i = 0;
  while (bytes >= 1024 && i < u.length - 1) { bytes /= 1024; i++; }
  return (i ? bytes.toFixed(1) : bytes) + " " + u[i];
}

export function showError(box, err) {
  box.textContent = err ? String(err.message || err) : "";
}

// A rolling line chart: push(v) adds a point and redraws (last `n` points).
export class LineChart {
  constructor(canvas, label, color, n = 60) {
    this.c = canvas; this.label = label; this.color = color; this.n = n; this.data = [];
  }
  push(v) {
    this.data.push(v);
    if (this.data.length > this.n) this.data.shift();
    this.draw();
  }
  draw() {
    const c = this.c, dpr = window.devicePixelRatio || 1;
    const w = c.clientWidth || 240, h = c.clientHeight || 120;
    c.width = w * dpr; c.height = h * dpr;
    const g = c.getContext("2d");
    g.scale(dpr, dpr);
    g.clearRect(0, 0, w, h);
    const max = Math.max(1, ...this.data);
    g.strokeStyle = this.color; g.lineWidth = 2; g.beginPath();
    this.data.forEach((v, i) => {
      const x = (i / Math.max(1, this.n - 1)) * w, y = h - 18 - (v / max) * (h - 28);
      i ? g.lineTo(x, y) : g.moveTo(x, y);
    });
    g.stroke();
    g.fillStyle = getComputedStyle(document.body).color;
    g.font = "12px system-ui";
    const last = this.data.length ? this.data[this.data.length - 1] : 0;
    g.fillText(`${this.label}: ${Number.isInteger(last) ? last : last.toFixed(1)}  (max ${max.toFixed(0)})`, 6, h - 4);
  }
}

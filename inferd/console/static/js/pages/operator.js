// Operator: per-model load (/load, every 2 s: running, waiting, slots, tokens/s with a chart
// each), latency percentiles from the /metrics histograms (since the server started), and the
// generators' slots (/slots: what each one is decoding), the requests in flight with a Cancel
// each (/admin/requests) and the server's recent errors (/admin/errors).
import { getJSON, postJSON, request } from "../api.js";
import { el, LineChart, showError } from "../ui.js";

const SAMPLE = /^([a-zA-Z_:][\w:]*)(?:\{(.*)\})?\s+(\S+)$/;
const LABEL = /(\w+)="((?:[^"\\]|\\.)*)"/g;

// {name: [{labels, value}]} of the Prometheus text.
export function parseMetrics(text) {
  const out = {};
  for (const line of text.split("\n")) {
    if (!line || line.startsWith("#")) continue;
    const m = SAMPLE.exec(line);
    if (!m) continue;
    const labels = {};
    for (const [, k, v] of (m[2] || "").matchAll(LABEL)) labels[k] = v;
    (out[m[1]] ||= []).push({ labels, value: Number(m[3]) });
  }
  return out;
}

// Prometheus' histogram_quantile over the cumulative buckets of one model (all its label sets).
export function quantile(samples, model, q) {
  const by = new Map();
  for (const s of samples || []) {
    if (s.labels.model !== model) continue;
    const le = s.labels.le === "+Inf" ? Infinity : Number(s.labels.le);
    by.set(le, (by.get(le) || 0) + s.value);
  }
  const b = [...by.entries()].sort((x, y) => x[0] - y[0]);
  if (!b.length || !b[b.length - 1][1]) return null;
  const rank = q * b[b.length - 1][1];
  let prevLe = 0, prevN = 0;
  for (const [le, n] of b) {
    if (n >= rank) {
      if (le === Infinity) return prevLe;
      return prevLe + (le - prevLe) * (n === prevN ? 0 : (rank - prevN) / (n - prevN));
    }
    prevLe = le; prevN = n;
  }
  return prevLe;
}

const clock = (t) => new Date(t * 1000).toLocaleTimeString();
const age = (s) => (s < 60 ? `${s.toFixed(1)} s` : `${Math.floor(s / 60)}m ${Math.round(s % 60)}s`);

const ms = (s) => (s === null ? "-" : s < 1 ? `${(s * 1000).toFixed(0)} ms` : `${s.toFixed(2)} s`);

export default {
  id: "operator",
  title: "Operator",
  mount(root) {
    const err = el("div", { class: "error", role: "alert" });
    const rows = el("tbody", { id: "op-models" });
    const charts = el("div", { class: "charts", id: "op-charts" });
    const slots = el("tbody", { id: "op-slots" });
    const head = (...hs) => el("thead", {}, el("tr", {}, ...hs.map((h) => el("th", { text: h }))));
    root.append(el("h1", { text: "Operator" }), err,
      el("div", { class: "card scroll" }, el("table", {}, head("Model", "Kind", "Running", "Waiting", "Slots in use",
        "tokens/s", "latency p50", "p95", "TTFT p50", "p95"), rows)),
      el("div", { class: "card" }, charts),
      el("div", { class: "card scroll" }, el("h2", { text: "Slots" }), el("table", {}, head("Slot", "Model", "State",
        "Decoded", "Remaining", "Prompt tokens", "Cached"), slots)));

    const active = el("tbody", { id: "op-active" }), errors = el("tbody", { id: "op-errors" });
    const noActive = el("p", { class: "muted", id: "op-no-active", text: "No request is running." });
    const noErrors = el("p", { class: "muted", id: "op-no-errors", text: "No error since the server started." });
    root.append(
      el("div", { class: "card scroll" }, el("h2", { text: "Active requests" }), el("table", {}, head("Request id",
        "Route", "Model", "Client", "Age", "State", "Tokens", "Cancel"), active), noActive),
      el("div", { class: "card scroll" }, el("h2", { text: "Recent errors" }), el("table", {}, head("Time", "Status",
        "Where", "Message", "Request id"), errors), noErrors));
    async function cancel(id) {
      try { await postJSON(`/admin/requests/${encodeURIComponent(id)}/cancel`, {}); } catch (e) { showError(err, e); }
      poll();
    }

    const prev = {}, chart = {};
    async function poll() {
      try {
        const [load, slotList, text] = await Promise.all([getJSON("/load"), getJSON("/slots"),
          request("/metrics").then((r) => (r.ok ? r.text() : ""))]);
        const m = parseMetrics(text);
        const now = performance.now();
        rows.replaceChildren(...Object.entries(load.models).sort().map(([name, x]) => {
          let tps = null;
          if (x.generated_tokens !== undefined) {
            const p = prev[name];
            tps = p ? Math.max(0, (x.generated_tokens - p.tokens) / ((now - p.t) / 1000)) : 0;
            prev[name] = { tokens: x.generated_tokens, t: now };
            if (!chart[name]) {
              const c = el("canvas", { "aria-label": `tokens per second of ${name}`, role: "img" });
              charts.append(el("div", {}, c));
              chart[name] = new LineChart(c, `${name} tok/s`, "#2f6fde");
            }
            chart[name].push(tps);
          }
          const lat = m.inferd_request_duration_seconds_bucket, ttft = m.inferd_time_to_first_token_seconds_bucket;
          return el("tr", { "data-model": name },
            el("td", { text: name }), el("td", { text: x.kind }), el("td", { class: "running", text: x.running }),
            el("td", { text: x.waiting }), el("td", { text: `${x.slots - x.slots_free}/${x.slots}` }),
            el("td", { class: "tps", text: tps === null ? "-" : tps.toFixed(1) }),
            el("td", { class: "p50", text: ms(quantile(lat, name, 0.5)) }), el("td", { class: "p95", text: ms(quantile(lat, name, 0.95)) }),
            el("td", { text: ms(quantile(ttft, name, 0.5)) }), el("td", { text: ms(quantile(ttft, name, 0.95)) }));
        }));
        slots.replaceChildren(...slotList.map((s) => el("tr", { "data-slot": s.id, "data-model": s.model },
          el("td", { text: s.id }), el("td", { text: s.model }),
          el("td", {}, el("span", { class: `pill ${s.is_processing ? "on" : ""}`, text: s.is_processing ? "busy" : "idle" })),
          el("td", { text: s.next_token ? s.next_token.n_decoded : "-" }),
          el("td", { text: s.next_token ? s.next_token.n_remain : "-" }),
          el("td", { text: s.n_prompt_tokens ?? "-" }), el("td", { text: s.tokens_cached ?? "-" }))));
        const [act, errs] = await Promise.all([getJSON("/admin/requests"), getJSON("/admin/errors")]);
        active.replaceChildren(...act.requests.map((r) => el("tr", { "data-id": r.id, "data-state": r.state },
          el("td", {}, el("code", { text: r.id })), el("td", { text: `${r.method} ${r.route}` }), el("td", { text: r.model || "-" }),
          el("td", { text: r.client || "-" }), el("td", { text: age(r.age_s) }),
          el("td", {}, el("span", { class: `pill ${r.state === "running" ? "on" : ""}`, text: r.state })),
          el("td", { class: "tokens", text: r.tokens ?? "-" }),
          el("td", {}, el("button", { class: "secondary small cancel", type: "button", disabled: !r.cancellable || r.state === "cancelling",
            "aria-label": `cancel request ${r.id}`, text: "Cancel", onclick: () => cancel(r.id) })))));
        noActive.hidden = act.requests.length > 0;
        errors.replaceChildren(...errs.errors.slice(0, 50).map((e) => el("tr", { "data-status": e.status ?? e.level },
          el("td", { text: clock(e.time) }), el("td", { class: "err-status", text: e.status ?? e.level }),
          el("td", { text: e.source === "log" ? e.logger : `${e.method} ${e.path}` }),
          el("td", { class: "message", text: e.message }), el("td", {}, el("code", { text: e.request_id || "-" })))));
        noErrors.hidden = errs.errors.length > 0;
        showError(err, null);
      } catch (e) { showError(err, e); }
    }
    poll();
    const timer = setInterval(poll, 2000);
    return { submit: poll, unmount: () => clearInterval(timer) };
  },
};

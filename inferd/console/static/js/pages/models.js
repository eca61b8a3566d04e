// Models: every served model with kind, format, size, load state, keep-alive countdown and
// Load / Unload buttons (/admin/models), plus live charts polled from /load every second.
import { getJSON, postJSON } from "../api.js";
import { el, human, LineChart, showError } from "../ui.js";

export default {
  id: "models",
  title: "Models",
  mount(root) {
    const err = el("div", { class: "error", role: "alert" });
    const tbody = el("tbody", { id: "models-rows" });
    const canvases = ["tokens/s", "queue depth", "slots in use"].map(() => el("canvas"));
    const charts = [new LineChart(canvases[0], "tokens/s", "#2f6fde"), new LineChart(canvases[1], "waiting", "#e06c2f"),
                    new LineChart(canvases[2], "slots in use", "#1f9d55")];
    const loadInfo = el("div", { class: "muted", id: "load-info" });
    root.append(el("h1", { text: "Models" }),
      el("div", { class: "card charts" }, ...canvases.map((c, i) => el("div", {}, c))), loadInfo,
      el("div", { class: "card scroll" }, el("table", {}, el("thead", {}, el("tr", {},
        ...["Model", "Kind", "Format", "Size", "State", "Memory", "Expires", ""].map((h) => el("th", { text: h })))),
        tbody)), err);

    let rows = [], fetchedAt = 0;
    const countdown = (m) => {
      if (!m.loaded) return "-";
      if (m.expires_in === null) return "never";
      const left = Math.max(0, m.expires_in - (performance.now() - fetchedAt) / 1000);
      return left >= 60 ? `${Math.floor(left / 60)}m ${Math.floor(left % 60)}s` : `${left.toFixed(0)}s`;
    };
    const act = async (path, name, btn) => {
      btn.disabled = true;
      showError(err, null);
      try { await postJSON(path, { model: name }); } catch (e) { showError(err, e); }
      await refresh();
    };
    const draw = () => {
      tbody.replaceChildren(...rows.map((m) => el("tr", { "data-model": m.name, "data-loaded": String(m.loaded) },
        el("td", { text: m.name }), el("td", { text: m.kind }), el("td", { text: m.format }),
        el("td", { text: m.size_bytes ? human(m.size_bytes) : "-" }),
        el("td", {}, el("span", { class: `pill state ${m.loaded ? "on" : ""}`,
                                  text: m.loaded ? (m.in_use ? `busy (${m.in_use})` : "loaded") : "not loaded" })),
        el("td", { text: m.loaded && m.resident_bytes ? human(m.resident_bytes) : "-" }),
        el("td", { class: "expires", text: countdown(m) }),
        el("td", {}, m.format === "builtin" ? el("span", { class: "muted", text: "built in" }) : m.loaded
          ? el("button", { class: "secondary unload", text: "Unload", onclick: (e) => act("/admin/models/unload", m.name, e.target) })
          : el("button", { class: "load", text: "Load", onclick: (e) => act("/admin/models/load", m.name, e.target) })))));
    };
    async function refresh() {
      try {
        rows = (await getJSON("/admin/models")).models;
        fetchedAt = performance.now();
        draw();
      } catch (e) { showError(err, e); }
    }
    let lastTokens = null, lastT = 0;
    async function poll() {
      try {
        const l = await getJSON("/load");
        const tokens = Object.values(l.models).reduce((a, m) => a + (m.generated_tokens || 0), 0);
        const now = performance.now();
        const tps = lastTokens === null ? 0 : Math.max(0, (tokens - lastTokens) / ((now - lastT) / 1000));
        lastTokens = tokens; lastT = now;
        charts[0].push(tps);
        charts[1].push(l.totals.waiting + l.totals.requests_queued);
        charts[2].push(l.totals.slots - l.totals.slots_free);
        loadInfo.textContent = `running ${l.totals.running} · waiting ${l.totals.waiting} · slots ` +
          `${l.totals.slots - l.totals.slots_free}/${l.totals.slots} · in flight ${l.totals.requests_in_flight}` +
          (l.draining ? " · DRAINING" : "");
      } catch (e) { showError(err, e); }
    }
    refresh(); poll();
    const timers = [setInterval(poll, 1000), setInterval(refresh, 5000),
                    setInterval(() => tbody.querySelectorAll("tr").forEach((tr, i) => {
                      if (rows[i]) tr.querySelector(".expires").textContent = countdown(rows[i]);
                    }), 1000)];
    return { submit: refresh, unmount: () => timers.forEach(clearInterval) };
  },
};

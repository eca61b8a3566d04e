// Models: every served model with kind, format, size, load state, keep-alive countdown and
// Load / Unload buttons (/admin/models), live charts polled from /load every second, and a
// pull (/api/pull, Ollama's NDJSON progress) with a progress bar per file.
import { getJSON, postJSON, postNDJSON } from "../api.js";
import { el, field, human, LineChart, showError } from "../ui.js";

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
    const pullName = el("input", { id: "pull-name", placeholder: "hf.co/bartowski/Llama-3.2-1B-Instruct-GGUF:Q4_K_M or llama3.2:1b" });
    const pullBtn = el("button", { id: "pull-run", text: "Pull" });
    const pullStop = el("button", { id: "pull-stop", class: "danger", text: "Stop", disabled: true });
    const bar = el("progress", { id: "pull-bar", max: "1", value: "0", "aria-label": "pull progress" });
    const pullStatus = el("div", { class: "muted", id: "pull-status", role: "status" });
    const pullCard = el("div", { class: "card" }, field("Pull a model", pullName),
                        el("div", { class: "row" }, pullBtn, pullStop), bar, pullStatus);
    root.append(el("h1", { text: "Models" }), pullCard,
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
    let pulling = null;
    async function pull() {
      const name = pullName.value.trim();
      if (!name || pulling) return;
      showError(err, null);
      pulling = new AbortController();
      pullBtn.disabled = true; pullStop.disabled = false;
      bar.value = 0;
      const files = {};  // digest -> [completed, total]: the bar shows all files together
      let seen = 0;
      try {
        await postNDJSON("/api/pull", { model: name }, pulling.signal, (ev) => {
          if (ev.digest && ev.total) {
            files[ev.digest] = [ev.completed || 0, ev.total];
            const done = Object.values(files).reduce((a, f) => a + f[0], 0);
            const total = Object.values(files).reduce((a, f) => a + f[1], 0);
            bar.max = total; bar.value = done;
            bar.dataset.updates = String(++seen);
            pullStatus.textContent = `${ev.status} · ${human(done)} of ${human(total)}`;
          } else pullStatus.textContent = ev.status;
        });
        if (pullStatus.textContent === "success") { bar.value = bar.max; await refresh(); }
      } catch (e) {
        pullStatus.textContent = e.name === "AbortError" ? "stopped" : "failed";
        if (e.name !== "AbortError") showError(err, e);
      } finally { pulling = null; pullBtn.disabled = false; pullStop.disabled = true; }
    }
    pullBtn.addEventListener("click", pull);
    pullStop.addEventListener("click", () => { if (pulling) pulling.abort(); });
    getJSON("/ai/v1/models").then((c) => {
      if (!c.allow_downloads) pullStatus.textContent = "This server does not download models (start it with --allow-downloads).";
    }).catch(() => {});
    refresh(); poll();
    const timers = [setInterval(poll, 1000), setInterval(refresh, 5000),
                    setInterval(() => tbody.querySelectorAll("tr").forEach((tr, i) => {
                      if (rows[i]) tr.querySelector(".expires").textContent = countdown(rows[i]);
                    }), 1000)];
    return { submit: () => (pullName.value.trim() ? pull() : refresh()), stop: () => { if (pulling) pulling.abort(); },
             unmount: () => { timers.forEach(clearInterval); if (pulling) pulling.abort(); } };
  },
};

// Chat: streamed /v1/chat/completions with sampling controls, reasoning shown apart,
// tool calls, JSON-schema output, Stop (aborts the fetch; the server cancels the sequence
// when the connection closes), TTFT and tokens/s per answer. Kept in localStorage.
import { getJSON, postSSE } from "../api.js";
import { el, field, select, showError } from "../ui.js";

const STORE = "inferd.chat";
const DEFAULTS = { model: "", system: "", temperature: "0.7", top_p: "1", max_tokens: "256", seed: "",
                   thinking: false, mode: "text", schema: "", tools: "", extra: "", messages: [] };

function load() {
  try { return { ...DEFAULTS, ...JSON.parse(localStorage.getItem(STORE) || "{}") }; } catch { return { ...DEFAULTS }; }
}

function renderMessage(m) {
  const box = el("div", { class: `msg ${m.role}` }, el("div", { class: "role", text: m.role }));
  const reasoning = el("details", { class: "reasoning", open: !m.stats },
                       el("summary", { text: "Reasoning" }), el("div", { class: "rtext" }));
  const content = el("div", { class: "content" });
  const tools = el("div", { class: "tools" });
  const stats = el("div", { class: "stats" });
  box.append(reasoning, content, tools, stats);
  const update = () => {
    reasoning.hidden = !m.reasoning;
    reasoning.querySelector(".rtext").textContent = m.reasoning || "";
    content.textContent = m.content || "";
    tools.replaceChildren(...(m.tool_calls || []).map((c) =>
      el("pre", { class: "tool-call", text: `${c.function.name}(${c.function.arguments})` })));
    const s = m.stats;
    stats.textContent = !s ? "" : [
      s.ttft !== undefined ? `TTFT ${s.ttft.toFixed(2)} s` : null,
      s.tps ? `${s.tps.toFixed(1)} tok/s` : null,
      s.tokens !== undefined ? `${s.tokens} tokens` : null,
      s.finish ? `finish: ${s.finish}` : null,
    ].filter(Boolean).join(" · ");
  };
  update();
  return { box, update };
}

function parseJSON(text, what) {
  try { return JSON.parse(text); } catch (e) { throw new Error(`${what} is not valid JSON: ${e.message}`); }
}

export default {
  id: "chat",
  title: "Chat",
  mount(root) {
    const st = load();
    const save = () => localStorage.setItem(STORE, JSON.stringify(st));
    const err = el("div", { class: "error", role: "alert" });
    const modelSel = el("select", { id: "chat-model" });
    const system = el("textarea", { id: "chat-system", rows: 3, placeholder: "You are a helpful assistant." });
    system.value = st.system;
    const num = (id, v, step) => { const i = el("input", { id, type: "number", step }); i.value = v; return i; };
    const temperature = num("chat-temperature", st.temperature, "0.05");
    const topP = num("chat-top-p", st.top_p, "0.05");
    const maxTokens = num("chat-max-tokens", st.max_tokens, "1");
    const seed = num("chat-seed", st.seed, "1");
    const thinking = el("input", { id: "chat-thinking", type: "checkbox", checked: st.thinking });
    const mode = select(["text", "json_schema"], st.mode);
    mode.id = "chat-mode";
    const schema = el("textarea", { id: "chat-schema", rows: 5,
                                    placeholder: '{"type": "object", "properties": {"answer": {"type": "string"}}}' });
    schema.value = st.schema;
    const tools = el("textarea", { id: "chat-tools", rows: 3, placeholder: '[{"type": "function", "function": {...}}]' });
    tools.value = st.tools;
    const extra = el("textarea", { id: "chat-extra", rows: 2, placeholder: '{"top_k": 40, "ignore_eos": true}' });
    extra.value = st.extra;
    const schemaBox = field("JSON schema", schema);
    const syncMode = () => { schemaBox.hidden = mode.value !== "json_schema"; };
    mode.addEventListener("change", syncMode);
    syncMode();

    const msgs = el("div", { class: "msgs", id: "chat-messages", "aria-live": "polite" });
    const input = el("textarea", { id: "chat-input", rows: 3, placeholder: "Message (Ctrl+Enter to send, Esc to stop)" });
    const send = el("button", { id: "chat-send", text: "Send" });
    const stopBtn = el("button", { id: "chat-stop", class: "danger", text: "Stop", disabled: true });
    const clear = el("button", { id: "chat-clear", class: "secondary", text: "New chat" });

    const settings = el("div", { class: "card" },
      field("Model", modelSel), field("System prompt", system),
      el("div", { class: "row" }, field("Temperature", temperature), field("top_p", topP)),
      el("div", { class: "row" }, field("Max tokens", maxTokens), field("Seed", seed)),
      el("label", { class: "check" }, thinking, "Thinking (enable_thinking)"),
      field("Output", mode), schemaBox, field("Tools (JSON, optional)", tools),
      field("More request fields (JSON, optional)", extra));
    root.append(el("h1", { text: "Chat" }), el("div", { class: "grid" }, settings,
      el("div", {}, el("div", { class: "card" }, msgs),
         el("div", { class: "card" }, input, el("div", { class: "row" }, send, stopBtn, clear), err))));

    const redraw = () => msgs.replaceChildren(...st.messages.map((m) => renderMessage(m).box));
    redraw();

    getJSON("/v1/models").then((list) => {
      const gens = list.data.filter((m) => (m.kind || m.type) === "generator").map((m) => m.id);
      modelSel.replaceChildren(...gens.map((g) => el("option", { value: g, text: g })));
      if (gens.includes(st.model)) modelSel.value = st.model;
      if (!gens.length) showError(err, "no generator is served");
    }).catch((e) => showError(err, e));

    let controller = null;
    const busy = (on) => { send.disabled = on; stopBtn.disabled = !on; };

    async function submit() {
      if (controller) return;
      const text = input.value.trim();
      if (!text) return;
      showError(err, null);
      Object.assign(st, { model: modelSel.value, system: system.value, temperature: temperature.value,
                          top_p: topP.value, max_tokens: maxTokens.value, seed: seed.value,
                          thinking: thinking.checked, mode: mode.value, schema: schema.value, tools: tools.value,
                          extra: extra.value });
      const body = { model: st.model, stream: true, stream_options: { include_usage: true }, messages: [] };
      try {
        if (st.temperature !== "") body.temperature = Number(st.temperature);
        if (st.top_p !== "") body.top_p = Number(st.top_p);
        if (st.max_tokens !== "") body.max_tokens = Number(st.max_tokens);
        if (st.seed !== "") body.seed = Number(st.seed);
        if (st.thinking) body.enable_thinking = true;
        if (st.mode === "json_schema") {
          body.response_format = { type: "json_schema",
                                   json_schema: { name: "output", strict: true, schema: parseJSON(st.schema, "the schema") } };
        }
        if (st.tools.trim()) body.tools = parseJSON(st.tools, "tools");
        if (st.extra.trim()) Object.assign(body, parseJSON(st.extra, "more request fields"));
      } catch (e) { showError(err, e); return; }
      if (st.system.trim()) body.messages.push({ role: "system", content: st.system });
      st.messages.push({ role: "user", content: text });
      for (const m of st.messages) {
        const out = { role: m.role, content: m.content || "" };
        if (m.tool_calls && m.tool_calls.length) out.tool_calls = m.tool_calls;
        body.messages.push(out);
      }
      input.value = "";
      const answer = { role: "assistant", content: "", reasoning: "", tool_calls: [], stats: null };
      st.messages.push(answer);
      save();
      redraw();
      const view = renderMessage(answer);
      msgs.lastChild.replaceWith(view.box);
      view.box.classList.add("streaming");
      controller = new AbortController();
      busy(true);
      const t0 = performance.now();
      let tFirst = 0, tLast = 0, chunks = 0, usage = null, finish = null, serverTps = 0;
      try {
        await postSSE("/v1/chat/completions", body, controller.signal, (chunk) => {
          if (chunk.usage) usage = chunk.usage;
          if (chunk.tps) serverTps = chunk.tps;  // the server's own decode rate (inferd chunks carry it)
          const choice = (chunk.choices || [])[0];
          if (!choice) return;
          const d = choice.delta || {};
          if (d.content || d.reasoning_content || (d.tool_calls && d.tool_calls.length)) {
            const now = performance.now();
            if (!tFirst) tFirst = now;
            tLast = now;
            chunks++;
          }
          if (d.content) answer.content += d.content;
          if (d.reasoning_content) answer.reasoning += d.reasoning_content;
          if (d.tool_calls) for (const c of d.tool_calls) answer.tool_calls.push(c);
          if (choice.finish_reason) finish = choice.finish_reason;
          view.update();
        });
      } catch (e) {
        if (e.name === "AbortError") finish = "stopped";
        else { finish = "error"; showError(err, e); }
      } finally {
        const tokens = usage ? usage.completion_tokens : chunks;
        const gen = (tLast - tFirst) / 1000;
        answer.stats = { ttft: tFirst ? (tFirst - t0) / 1000 : undefined, tokens, finish: finish || "stop",
                         tps: serverTps || (tokens > 1 && gen > 0 ? (tokens - 1) / gen : 0) };
        view.box.classList.remove("streaming");
        view.box.querySelector("details").open = false;
        view.update();
        save();
        controller = null;
        busy(false);
      }
    }

    function stop() { if (controller) controller.abort(); }
    send.addEventListener("click", submit);
    stopBtn.addEventListener("click", stop);
    clear.addEventListener("click", () => { stop(); st.messages = []; save(); redraw(); });
    return { submit, stop, unmount: stop };
  },
};

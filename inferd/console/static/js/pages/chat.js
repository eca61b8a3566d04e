// Chat: streamed /v1/chat/completions with sampling controls, answers rendered as Markdown,
// reasoning shown apart, tool calls, JSON-schema output, image attachments (pick, paste or
// drop; sent as image_url data URIs), speech input (a recording or an audio file, transcribed
// into the message box by the first transcriber), edit a user turn and regenerate from it, Stop (aborts the
// fetch; the server cancels the sequence when the connection closes), TTFT and tokens/s per
// answer. Settings and conversations are kept in localStorage (see ../chats.js).
import { getJSON, postSSE } from "../api.js";
import { Recorder, transcribe } from "../audio.js";
import { Chats } from "../chats.js";
import { render as markdown } from "../markdown.js";
import { el, field, select, showError } from "../ui.js";

const STORE = "inferd.chat";
const DEFAULTS = { model: "", system: "", temperature: "0.7", top_p: "1", max_tokens: "256", seed: "",
                   thinking: false, mode: "text", schema: "", tools: "", extra: "" };
const MAX_IMAGE = 8 * 1024 * 1024;

function loadSettings() {
  try {
    const s = { ...DEFAULTS, ...JSON.parse(localStorage.getItem(STORE) || "{}") };
    delete s.messages;  // older consoles kept one conversation here; Chats moves it over
    return s;
  } catch { return { ...DEFAULTS }; }
}

// The default generator: one that chats well. Names of instruction-tuned models say so
// (-instruct, -chat, -it); a base model (e.g. gemma-3-270m) continues text instead of answering.
export function defaultGenerator(catalog) {
  const names = Object.keys(catalog || {}).sort();
  const tuned = names.filter((n) => /(instruct|chat|(^|[-_.])it($|[-_.]))/i.test(n));
  const chat = (list) => list.filter((n) => (catalog[n].capabilities || []).includes("chat"));
  return chat(tuned)[0] || tuned[0] || chat(names)[0] || names[0] || "";
}

const textOf = (c) => typeof c === "string" ? c : (c || []).filter((p) => p.type === "text").map((p) => p.text).join("\n");
const imagesOf = (c) => typeof c === "string" ? [] : (c || []).filter((p) => p.type === "image_url").map((p) => p.image_url.url);

function parseJSON(text, what) {
  try { return JSON.parse(text); } catch (e) { throw new Error(`${what} is not valid JSON: ${e.message}`); }
}

function readImage(file) {
  return new Promise((resolve, reject) => {
    if (!file.type.startsWith("image/")) { reject(new Error(`${file.name || "the file"} is not an image`)); return; }
    if (file.size > MAX_IMAGE) { reject(new Error(`${file.name} is larger than 8 MB`)); return; }
    const r = new FileReader();
    r.onload = () => resolve(r.result);
    r.onerror = () => reject(r.error);
    r.readAsDataURL(file);
  });
}

export default {
  id: "chat",
  title: "Chat",
  mount(root) {
    const st = loadSettings();
    const chats = new Chats();
    const saveSettings = () => localStorage.setItem(STORE, JSON.stringify(st));
    const err = el("div", { class: "error", role: "alert" });
    const modelSel = el("select", { id: "chat-model" });
    const modelInfo = el("div", { class: "muted", id: "chat-model-info" });
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

    // Conversation list
    const search = el("input", { id: "chat-search", type: "search", placeholder: "Search conversations",
                                 "aria-label": "search conversations" });
    const convList = el("ul", { class: "convs", id: "chat-convs" });
    const importInput = el("input", { id: "chat-import", type: "file", accept: "application/json,.json", hidden: true,
                                     "aria-label": "import conversations" });
    const newBtn = el("button", { id: "chat-clear", class: "secondary", text: "New chat", title: "New chat (Alt+N)" });
    const exportBtn = el("button", { id: "chat-export", class: "secondary", text: "Export" });
    const importBtn = el("button", { id: "chat-import-btn", class: "secondary", text: "Import" });
    const storeNote = el("div", { class: "muted", id: "chat-store-note", role: "status" });
    const convCard = el("div", { class: "card" }, el("div", { class: "row" }, newBtn, exportBtn, importBtn, importInput),
                        el("label", { class: "sr-only", for: "chat-search", text: "Search" }), search, convList, storeNote);

    const msgs = el("div", { class: "msgs", id: "chat-messages", "aria-live": "polite" });
    const input = el("textarea", { id: "chat-input", rows: 3, "aria-label": "message",
                                   placeholder: "Message (Ctrl+Enter to send, Esc to stop, paste an image to attach)" });
    const send = el("button", { id: "chat-send", text: "Send" });
    const stopBtn = el("button", { id: "chat-stop", class: "danger", text: "Stop", disabled: true });
    const attach = el("input", { id: "chat-attach", type: "file", accept: "image/*", multiple: true, class: "sr-only" });
    const attachLabel = el("label", { for: "chat-attach", class: "button secondary", text: "Attach image" });
    const thumbs = el("div", { class: "thumbs", id: "chat-attachments" });
    const micBtn = el("button", { id: "chat-mic", class: "secondary", type: "button", text: "Speak", hidden: true,
                                  title: "record a message (transcribed into the box)" });
    const audioIn = el("input", { id: "chat-audio", type: "file", accept: "audio/*", class: "sr-only", hidden: true });
    const audioLabel = el("label", { for: "chat-audio", class: "button secondary", text: "Audio file", hidden: true });
    const recorder = new Recorder();
    let transcriber = "";
    let pending = [];  // data URIs attached to the next message

    const settings = el("div", { class: "card" },
      field("Model", modelSel), modelInfo, field("System prompt", system),
      el("div", { class: "row" }, field("Temperature", temperature), field("top_p", topP)),
      el("div", { class: "row" }, field("Max tokens", maxTokens), field("Seed", seed)),
      el("label", { class: "check" }, thinking, "Thinking (enable_thinking)"),
      field("Output", mode), schemaBox, field("Tools (JSON, optional)", tools),
      field("More request fields (JSON, optional)", extra));
    root.append(el("h1", { text: "Chat" }), el("div", { class: "grid" }, el("div", {}, convCard, settings),
      el("div", {}, el("div", { class: "card" }, msgs),
         el("div", { class: "card" }, thumbs, input,
            el("div", { class: "row" }, send, stopBtn, attachLabel, attach, micBtn, audioLabel, audioIn), err))));

    const drawThumbs = () => thumbs.replaceChildren(...pending.map((u, i) => el("figure", { class: "thumb" },
      el("img", { src: u, alt: `attachment ${i + 1}` }),
      el("button", { class: "secondary", type: "button", text: "×", "aria-label": `remove attachment ${i + 1}`,
                     onclick: () => { pending.splice(i, 1); drawThumbs(); } }))));
    const addFiles = async (files) => {
      showError(err, null);
      for (const f of files) {
        try { pending.push(await readImage(f)); } catch (e) { showError(err, e); }
      }
      drawThumbs();
    };
    attach.addEventListener("change", () => { addFiles([...attach.files]); attach.value = ""; });
    input.addEventListener("dragover", (e) => { e.preventDefault(); input.classList.add("drop"); });
    input.addEventListener("dragleave", () => input.classList.remove("drop"));
    input.addEventListener("drop", (e) => {
      input.classList.remove("drop");
      const files = [...(e.dataTransfer || {}).files || []].filter((f) => f.type.startsWith("image/"));
      if (files.length) { e.preventDefault(); addFiles(files); }
    });
    const speech = async (blob) => {
      showError(err, null);
      micBtn.disabled = true;
      try {
        const body = await transcribe(blob, blob.name, transcriber);
        const text = body.text.trim();
        input.value = input.value.trim() ? `${input.value.trimEnd()} ${text}` : text;
        input.focus();
      } catch (e) { showError(err, e); } finally { micBtn.disabled = false; }
    };
    audioIn.addEventListener("change", () => { const f = audioIn.files[0]; audioIn.value = ""; if (f) speech(f); });
    micBtn.addEventListener("click", async () => {
      try {
        if (!recorder.recording) {
          await recorder.start();
          micBtn.textContent = "Stop recording";
          micBtn.classList.add("danger");
        } else {
          micBtn.textContent = "Speak";
          micBtn.classList.remove("danger");
          speech(await recorder.stop());
        }
      } catch (e) { showError(err, e); }
    });
    input.addEventListener("paste", (e) => {
      const files = [...(e.clipboardData || {}).files || []].filter((f) => f.type.startsWith("image/"));
      if (files.length) { e.preventDefault(); addFiles(files); }
    });

    let controller = null;
    const busy = (on) => { send.disabled = on; stopBtn.disabled = !on; };

    function drawConvs() {
      storeNote.textContent = chats.note || "";
      const q = search.value.trim().toLowerCase();
      convList.replaceChildren(...chats.search(q).map((c) => {
        const open = el("button", { class: "link open", type: "button", text: c.title || "New chat",
                                    "aria-current": c.id === chats.current.id ? "true" : null,
                                    onclick: () => { stop(); chats.select(c.id); redraw(); } });
        const rename = el("button", { class: "link rename", type: "button", text: "Rename", "aria-label": `rename ${c.title}`,
          onclick: () => {
            const box = el("input", { class: "rename-input", value: c.title, "aria-label": "new title" });
            const done = () => { chats.rename(c.id, box.value.trim() || c.title); drawConvs(); };
            box.addEventListener("keydown", (e) => { if (e.key === "Enter") done(); else if (e.key === "Escape") drawConvs(); });
            box.addEventListener("blur", done);
            open.replaceWith(box);
            box.focus();
            box.select();
          } });
        const del = el("button", { class: "link delete", type: "button", text: "Delete", "aria-label": `delete ${c.title}`,
          onclick: () => { if (c.id === chats.current.id) stop(); chats.remove(c.id); redraw(); } });
        return el("li", { "data-id": c.id, class: c.id === chats.current.id ? "current" : "" }, open, rename, del);
      }));
    }

    function renderMessage(m, index) {
      const box = el("div", { class: `msg ${m.role}`, "data-index": index }, el("div", { class: "role", text: m.role }));
      if (m.role === "user") {
        const imgs = imagesOf(m.content);
        const content = el("div", { class: "content", text: textOf(m.content) });
        const edit = el("button", { class: "link edit", type: "button", text: "Edit", "aria-label": "edit and regenerate",
          onclick: () => {
            if (controller) return;
            const area = el("textarea", { class: "edit-input", rows: 3, "aria-label": "edited message" });
            area.value = textOf(m.content);
            const go = el("button", { class: "resend", type: "button", text: "Send",
              onclick: () => {
                const parts = imagesOf(m.content).map((url) => ({ type: "image_url", image_url: { url } }));
                const text = area.value.trim();
                if (!text && !parts.length) return;
                const msg = { role: "user", content: parts.length ? [{ type: "text", text }, ...parts] : text };
                const list = chats.current.messages.slice(0, index);
                list.push(msg);
                chats.setMessages(list);
                generate();
              } });
            const cancel = el("button", { class: "secondary", type: "button", text: "Cancel", onclick: redraw });
            content.replaceWith(el("div", { class: "editing" }, area, el("div", { class: "row" }, go, cancel)));
            area.focus();
          } });
        box.append(...imgs.map((u) => el("img", { class: "attached", src: u, alt: "attached image" })), content,
                   el("div", { class: "actions" }, edit));
        return { box, update: () => {} };
      }
      const reasoning = el("details", { class: "reasoning", open: !m.stats },
                           el("summary", { text: "Reasoning" }), el("div", { class: "rtext" }));
      const content = el("div", { class: "content md" });
      const toolsBox = el("div", { class: "tools" });
      const stats = el("div", { class: "stats" });
      const regen = el("button", { class: "link regenerate", type: "button", text: "Regenerate",
        onclick: () => { if (!controller) { chats.setMessages(chats.current.messages.slice(0, index)); generate(); } } });
      box.append(reasoning, content, toolsBox, stats, el("div", { class: "actions" }, regen));
      let shown = null;
      const update = () => {
        reasoning.hidden = !m.reasoning;
        reasoning.querySelector(".rtext").textContent = m.reasoning || "";
        if (shown !== m.content) { content.replaceChildren(markdown(m.content || "")); shown = m.content; }
        toolsBox.replaceChildren(...(m.tool_calls || []).map((c) =>
          el("pre", { class: "tool-call", text: `${c.function.name}(${c.function.arguments})` })));
        const s = m.stats;
        regen.hidden = !s;
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

    function redraw() {
      msgs.replaceChildren(...chats.current.messages.map((m, i) => renderMessage(m, i).box));
      drawConvs();
    }
    redraw();

    let catalog = {};
    const showInfo = () => {
      const c = catalog[modelSel.value];
      const vision = c && ((c.inputs || []).includes("image") || (c.capabilities || []).includes("vision"));
      modelInfo.textContent = !c ? "" : vision ? "takes text and images" : "takes text (attach images with a vision model)";
    };
    modelSel.addEventListener("change", showInfo);
    getJSON("/ai/v1/models").then((cat) => {
      transcriber = Object.keys(cat.transcribers || {}).sort()[0] || "";
      micBtn.hidden = audioLabel.hidden = audioIn.hidden = !transcriber;  // no label left for a visible input
      catalog = cat.generators || {};
      const gens = Object.keys(catalog).sort();
      modelSel.replaceChildren(...gens.map((g) => el("option", { value: g, text: g })));
      modelSel.value = gens.includes(st.model) ? st.model : defaultGenerator(catalog);
      showInfo();
      if (!gens.length) showError(err, "no generator is served");
    }).catch((e) => showError(err, e));

    function request() {
      Object.assign(st, { model: modelSel.value, system: system.value, temperature: temperature.value,
                          top_p: topP.value, max_tokens: maxTokens.value, seed: seed.value,
                          thinking: thinking.checked, mode: mode.value, schema: schema.value, tools: tools.value,
                          extra: extra.value });
      saveSettings();
      const body = { model: st.model, stream: true, stream_options: { include_usage: true }, messages: [] };
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
      if (st.system.trim()) body.messages.push({ role: "system", content: st.system });
      for (const m of chats.current.messages) {
        const out = { role: m.role, content: m.content || "" };
        if (m.tool_calls && m.tool_calls.length) out.tool_calls = m.tool_calls;
        body.messages.push(out);
      }
      return body;
    }

    function submit() {
      if (controller) return;
      const text = input.value.trim();
      if (!text && !pending.length) return;
      const content = pending.length
        ? [{ type: "text", text }, ...pending.map((url) => ({ type: "image_url", image_url: { url } }))] : text;
      chats.setMessages([...chats.current.messages, { role: "user", content }]);
      input.value = "";
      pending = [];
      drawThumbs();
      generate();
    }

    // Answers the conversation as it stands (its last turn is the user's).
    async function generate() {
      showError(err, null);
      let body;
      try { body = request(); } catch (e) { showError(err, e); redraw(); return; }
      const answer = { role: "assistant", content: "", reasoning: "", tool_calls: [], stats: null };
      const conv = chats.current;
      chats.setMessages([...conv.messages, answer]);
      redraw();
      const view = renderMessage(answer, conv.messages.length - 1);
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
        chats.touch(conv.id);
        controller = null;
        busy(false);
        drawConvs();
      }
    }

    function stop() { if (controller) controller.abort(); }
    function newChat() { stop(); chats.create(); redraw(); input.focus(); }
    send.addEventListener("click", submit);
    stopBtn.addEventListener("click", stop);
    newBtn.addEventListener("click", newChat);
    search.addEventListener("input", drawConvs);
    exportBtn.addEventListener("click", () => {
      const blob = new Blob([JSON.stringify(chats.export(), null, 1)], { type: "application/json" });
      const a = el("a", { href: URL.createObjectURL(blob), download: "inferd-conversations.json" });
      document.body.append(a);
      a.click();
      a.remove();
      setTimeout(() => URL.revokeObjectURL(a.href), 1000);
    });
    importBtn.addEventListener("click", () => importInput.click());
    importInput.addEventListener("change", async () => {
      const f = importInput.files[0];
      importInput.value = "";
      if (!f) return;
      try { chats.import(JSON.parse(await f.text())); redraw(); showError(err, null); } catch (e) { showError(err, e); }
    });
    return { submit, stop, unmount: () => { stop(); recorder.cancel(); }, new: newChat, focus: () => input.focus() };
  },
};

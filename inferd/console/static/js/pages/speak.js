// Speak: text -> POST /v1/audio/speech (OpenAI's body: model, input, voice, response_format,
// speed) -> the audio in a player, with a download link. The voices are the speaker's own
// (its /ai/v1/models entry's `voices`) and the OpenAI names it maps (`openai_voices`). The
// nav hides this page while no speaker is served (`needs`, app.js).
import { errorText, getJSON, request } from "../api.js";
import { el, field, human, select, showError } from "../ui.js";

// What the player can play; pcm (raw 16-bit samples) is offered for download only.
const FORMATS = ["mp3", "wav", "opus", "aac", "flac", "pcm"];
const TYPES = { mp3: "audio/mpeg", wav: "audio/wav", opus: "audio/ogg", aac: "audio/aac", flac: "audio/flac",
                pcm: "application/octet-stream" };

export default {
  id: "speak",
  title: "Speak",
  needs: "speakers",
  mount(root) {
    const err = el("div", { class: "error", role: "alert" });
    const model = el("select", { id: "sp-model" });
    const voice = el("select", { id: "sp-voice" });
    const text = el("textarea", { id: "sp-text", rows: 4, text: "The quick brown fox jumps over the lazy dog." });
    const speed = el("input", { id: "sp-speed", type: "number", min: "0.25", max: "4", step: "0.05", value: "1" });
    const format = select(FORMATS, "mp3");
    format.id = "sp-format";
    const go = el("button", { id: "sp-run", text: "Speak" });
    const player = el("audio", { id: "sp-audio", controls: true, hidden: true });
    const link = el("a", { id: "sp-download", hidden: true, text: "Download" });
    const info = el("div", { class: "muted", id: "sp-info" });
    root.append(el("h1", { text: "Speak" }), el("div", { class: "card" }, field("Speaker", model), field("Voice", voice),
      field("Text", text), el("div", { class: "row" }, field("Speed (0.25 to 4)", speed), field("Format", format)),
      el("div", { class: "row" }, go), err),
      el("div", { class: "card" }, player, info, link));

    let speakers = {};
    const voices = () => {
      const m = speakers[model.value] || {};
      const own = m.voices || [], mapped = (m.openai_voices || []).filter((v) => !own.includes(v));
      voice.replaceChildren(...own.map((v) => el("option", { value: v, text: v })),
        ...mapped.map((v) => el("option", { value: v, text: `${v} (OpenAI name)` })));
    };
    model.addEventListener("change", voices);
    getJSON("/ai/v1/models").then((cat) => {
      speakers = cat.speakers || {};
      const names = Object.keys(speakers).sort();
      model.replaceChildren(...names.map((m) => el("option", { value: m, text: m })));
      voices();
      if (!names.length) info.textContent = "No speaker is served (put a Piper voice under speakers/).";
    }).catch((e) => showError(err, e));

    let url = null;
    async function submit() {
      showError(err, null);
      go.disabled = true;
      info.textContent = "speaking...";
      const fmt = format.value, t0 = performance.now();
      try {
        const res = await request("/v1/audio/speech", { method: "POST", headers: { "Content-Type": "application/json" },
          body: JSON.stringify({ model: model.value, input: text.value, voice: voice.value || undefined,
                                 response_format: fmt, speed: Number(speed.value) }) });
        if (!res.ok) throw new Error(errorText(await res.json().catch(() => null), res.status));
        const blob = new Blob([await res.arrayBuffer()], { type: TYPES[fmt] });
        if (url) URL.revokeObjectURL(url);
        url = URL.createObjectURL(blob);
        player.hidden = fmt === "pcm";
        if (fmt !== "pcm") player.src = url;
        Object.assign(link, { href: url, download: `speech.${fmt}`, hidden: false });
        const secs = ((performance.now() - t0) / 1000).toFixed(2);
        info.textContent = `${human(blob.size)} of ${fmt} in ${secs} s` + (fmt === "pcm" ? " (raw samples: download only)" : "");
      } catch (e) { showError(err, e); info.textContent = ""; }
      finally { go.disabled = false; }
    }
    go.addEventListener("click", submit);
    return { submit, unmount: () => { if (url) URL.revokeObjectURL(url); } };
  },
};

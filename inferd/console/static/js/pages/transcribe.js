// Transcribe: an audio file or a microphone recording -> /v1/audio/transcriptions (multipart,
// verbose_json) -> the text and its segments with timestamps; "translate" uses
// /v1/audio/translations (multilingual models).
import { modelsOf } from "../api.js";
import { Recorder, transcribe } from "../audio.js";
import { el, field, showError } from "../ui.js";

const clock = (s) => `${Math.floor(s / 60)}:${(s % 60).toFixed(2).padStart(5, "0")}`;

export default {
  id: "transcribe",
  title: "Transcribe",
  mount(root) {
    const err = el("div", { class: "error", role: "alert" });
    const model = el("select", { id: "tr-model" });
    const file = el("input", { id: "tr-file", type: "file", accept: "audio/*,.wav,.mp3,.flac,.ogg,.m4a,.webm" });
    const language = el("input", { id: "tr-language", value: "auto" });
    const translate = el("input", { id: "tr-translate", type: "checkbox" });
    const go = el("button", { id: "tr-run", text: "Transcribe" });
    const recBtn = el("button", { id: "tr-record", class: "secondary", type: "button", text: "Record" });
    const recorder = new Recorder();
    let recorded = null;  // the last recording, used instead of the file until another file is picked
    const player = el("audio", { id: "tr-audio", controls: true, hidden: true });
    const text = el("p", { id: "tr-text" });
    const segs = el("tbody", { id: "tr-segments" });
    const info = el("div", { class: "muted", id: "tr-info" });
    root.append(el("h1", { text: "Transcribe" }), el("div", { class: "card" }, field("Transcriber", model),
      field("Audio file (WAV, MP3, FLAC, OGG, M4A, WebM)", file), field("Language (auto detects it)", language),
      el("label", { class: "check" }, translate, "Translate to English"),
      el("div", { class: "row" }, go, recBtn), err),
      el("div", { class: "card" }, player, info, text,
         el("div", { class: "scroll" }, el("table", {}, el("thead", {}, el("tr", {},
           el("th", { text: "Start" }), el("th", { text: "End" }), el("th", { text: "Text" }))), segs))));
    modelsOf("transcribers").then((ms) => {
      model.replaceChildren(...ms.map((m) => el("option", { value: m, text: m })));
      if (!ms.length) info.textContent = "No transcriber is served (put a Whisper model under transcribers/).";
    }).catch((e) => showError(err, e));
    const play = (f) => {
      if (player.src) URL.revokeObjectURL(player.src);
      player.hidden = !f;
      if (f) player.src = URL.createObjectURL(f);
    };
    file.addEventListener("change", () => { recorded = null; play(file.files[0]); });
    recBtn.addEventListener("click", async () => {
      showError(err, null);
      try {
        if (!recorder.recording) {
          await recorder.start();
          recBtn.textContent = "Stop recording";
          recBtn.classList.add("danger");
        } else {
          recorded = await recorder.stop();
          recBtn.textContent = "Record";
          recBtn.classList.remove("danger");
          play(recorded);
          submit();
        }
      } catch (e) { showError(err, e); }
    });

    async function submit() {
      showError(err, null);
      const f = recorded || file.files[0];
      if (!f) { showError(err, "pick an audio file or record first"); return; }
      if (!model.value) return;
      const extra = { response_format: "verbose_json" };
      if (!translate.checked && language.value.trim()) extra.language = language.value.trim();
      go.disabled = true;
      info.textContent = "transcribing…";
      const t0 = performance.now();
      try {
        const body = await transcribe(f, f.name, model.value, extra, translate.checked);
        text.textContent = body.text;
        segs.replaceChildren(...(body.segments || []).map((s) => el("tr", { "data-start": s.start, "data-end": s.end },
          el("td", {}, el("button", { class: "link seek", type: "button", text: clock(s.start), "aria-label": `play from ${clock(s.start)}`,
                                      onclick: () => { player.currentTime = s.start; player.play().catch(() => {}); } })),
          el("td", { text: clock(s.end) }), el("td", { class: "seg-text", text: s.text.trim() }))));
        info.textContent = `${body.language || ""} · ${Number(body.duration || 0).toFixed(2)} s of audio · ` +
          `${((performance.now() - t0) / 1000).toFixed(2)} s`;
      } catch (e) { showError(err, e); info.textContent = ""; } finally { go.disabled = false; }
    }
    go.addEventListener("click", submit);
    return { submit, unmount: () => { recorder.cancel(); if (player.src) URL.revokeObjectURL(player.src); } };
  },
};

// Audio for the console: transcribe a file or a recording through /v1/audio/transcriptions,
// and a microphone recorder (MediaRecorder; WebM/Opus, which the server decodes).
import { errorText, request } from "./api.js";

export async function transcribe(blob, name, model, fields = {}, translate = false) {
  const form = new FormData();
  form.append("file", blob, name);
  form.append("model", model);
  for (const [k, v] of Object.entries(fields)) form.append(k, v);
  const res = await request(translate ? "/v1/audio/translations" : "/v1/audio/transcriptions",
                            { method: "POST", body: form });
  const body = await res.json().catch(() => null);
  if (!res.ok) throw new Error(errorText(body, res.status));
  return body;
}

// start() asks for the microphone and records; stop() resolves with the recording as a File.
export class Recorder {
  constructor() { this.rec = null; }
  get recording() { return !!this.rec; }
  async start() {
    if (!navigator.mediaDevices || !window.MediaRecorder) throw new Error("this browser cannot record audio here");
    const stream = await navigator.mediaDevices.getUserMedia({ audio: true });
    const type = ["audio/webm;codecs=opus", "audio/webm", "audio/ogg;codecs=opus"].find((t) => MediaRecorder.isTypeSupported(t));
    this.chunks = [];
    this.rec = new MediaRecorder(stream, type ? { mimeType: type } : {});
    this.rec.ondataavailable = (e) => { if (e.data.size) this.chunks.push(e.data); };
    this.rec.start();
  }
  stop() {
    const rec = this.rec;
    this.rec = null;
    if (!rec) return Promise.resolve(null);
    return new Promise((resolve) => {
      rec.onstop = () => {
        rec.stream.getTracks().forEach((t) => t.stop());
        const type = (rec.mimeType || "audio/webm").split(";")[0];
        resolve(new File(this.chunks, `recording.${type.endsWith("ogg") ? "ogg" : "webm"}`, { type }));
      };
      rec.stop();
    });
  }
  cancel() {
    const rec = this.rec;
    this.rec = null;
    if (!rec) return;
    rec.onstop = null;
    rec.stream.getTracks().forEach((t) => t.stop());
    if (rec.state !== "inactive") rec.stop();
  }
}

// Calls to this server. Adds the API key (asked for once, kept in sessionStorage) and turns
// error envelopes of every API family into one Error with a readable message.
const KEY = "inferd.apiKey";
let asking = null;

export function apiKey() { return sessionStorage.getItem(KEY); }

function askKey() {
  if (asking) return asking;
  const dlg = document.getElementById("keydlg"), input = document.getElementById("keyinput");
  asking = new Promise((resolve) => {
    input.value = "";
    dlg.addEventListener("close", () => {
      asking = null;
      if (input.value) sessionStorage.setItem(KEY, input.value.trim());
      resolve(!!input.value);
    }, { once: true });
    dlg.showModal();
    input.focus();
  });
  return asking;
}

function headers(extra) {
  const h = { ...(extra || {}) };
  const k = apiKey();
  if (k) h["Authorization"] = "Bearer " + k;
  return h;
}

export function errorText(body, status) {
  if (!body) return `HTTP ${status}`;
  if (typeof body.error === "string") return body.message ? `${body.error}: ${body.message}` : body.error;
  if (body.error && body.error.message) return body.error.message;
  return `HTTP ${status}`;
}

// fetch with the key; a 401 asks for the key and retries once.
export async function request(path, opts = {}) {
  for (let attempt = 0; ; attempt++) {
    const res = await fetch(path, { ...opts, headers: headers(opts.headers) });
    if (res.status === 401 && attempt === 0 && await askKey()) continue;
    return res;
  }
}

export async function getJSON(path) {
  const res = await request(path);
  const body = await res.json().catch(() => null);
  if (!res.ok) throw new Error(errorText(body, res.status));
  return body;
}

export async function postJSON(path, data, signal) {
  const res = await request(path, { method: "POST", body: JSON.stringify(data), signal,
                                    headers: { "Content-Type": "application/json" } });
  const body = await res.json().catch(() => null);
  if (!res.ok) throw new Error(errorText(body, res.status));
  return { body, headers: res.headers };
}

// POST and read a text/event-stream: onData(obj) for each `data:` JSON frame until [DONE].
export async function postSSE(path, data, signal, onData) {
  const res = await request(path, { method: "POST", body: JSON.stringify(data), signal,
                                    headers: { "Content-Type": "application/json", "Accept": "text/event-stream" } });
  if (!res.ok) {
    const body = await res.json().catch(() => null);
    throw new Error(errorText(body, res.status));
  }
  const reader = res.body.getReader(), dec = new TextDecoder();
  let buf = "";
  for (;;) {
    const { value, done } = await reader.read();
    if (done) break;
    buf += dec.decode(value, { stream: true });
    let cut;
    while ((cut = buf.indexOf("\n\n")) >= 0) {
      const frame = buf.slice(0, cut);
      buf = buf.slice(cut + 2);
      const lines = frame.split("\n").filter((l) => l.startsWith("data:")).map((l) => l.slice(5).trimStart());
      if (!lines.length) continue;
      const text = lines.join("\n");
      if (text === "[DONE]") return;
      const obj = JSON.parse(text);
      if (obj.error) throw new Error(errorText(obj, 500));
      onData(obj);
    }
  }
}

// POST and read an NDJSON stream (Ollama's progress lines): onData(obj) per line.
export async function postNDJSON(path, data, signal, onData) {
  const res = await request(path, { method: "POST", body: JSON.stringify(data), signal,
                                    headers: { "Content-Type": "application/json" } });
  if (!res.ok) {
    const body = await res.json().catch(() => null);
    throw new Error(errorText(body, res.status));
  }
  const reader = res.body.getReader(), dec = new TextDecoder();
  let buf = "";
  for (;;) {
    const { value, done } = await reader.read();
    if (done) break;
    buf += dec.decode(value, { stream: true });
    let cut;
    while ((cut = buf.indexOf("\n")) >= 0) {
      const line = buf.slice(0, cut).trim();
      buf = buf.slice(cut + 1);
      if (!line) continue;
      const obj = JSON.parse(line);
      if (obj.error) throw new Error(errorText(obj, 500));
      onData(obj);
    }
  }
  if (buf.trim()) onData(JSON.parse(buf));
}

// Models of one kind ("generators", "embedders", ...) from the Antfly catalog.
export async function modelsOf(kind) {
  const cat = await getJSON("/ai/v1/models");
  return Object.keys(cat[kind] || {}).sort();
}

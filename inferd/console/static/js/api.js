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

// POST `data` as JSON; the response, or the server's error as an Error.
async function postStream(path, data, signal, accept) {
  const headers = { "Content-Type": "application/json" };
  if (accept) headers.Accept = accept;
  const res = await request(path, { method: "POST", body: JSON.stringify(data), signal, headers });
  if (!res.ok) {
    const body = await res.json().catch(() => null);
    throw new Error(errorText(body, res.status));
  }
  return res;
}

// Each `sep`-separated frame of a streamed body, in order; onFrame returns true to stop.
// What is left after the last separator is returned.
async function eachFrame(res, sep, onFrame) {
  const reader = res.body.getReader(), dec = new TextDecoder();
  let buf = "";
  for (;;) {
    const { value, done } = await reader.read();
    if (done) return buf;
    buf += dec.decode(value, { stream: true });
    let cut;
    while ((cut = buf.indexOf(sep)) >= 0) {
      const frame = buf.slice(0, cut);
      buf = buf.slice(cut + sep.length);
      if (onFrame(frame)) return "";
    }
  }
}

function checked(obj) {
  if (obj.error) throw new Error(errorText(obj, 500));
  return obj;
}

// POST and read a text/event-stream: onData(obj) for each `data:` JSON frame until [DONE].
export async function postSSE(path, data, signal, onData) {
  const res = await postStream(path, data, signal, "text/event-stream");
  await eachFrame(res, "\n\n", (frame) => {
    const lines = frame.split("\n").filter((l) => l.startsWith("data:")).map((l) => l.slice(5).trimStart());
    if (!lines.length) return false;
    const text = lines.join("\n");
    if (text === "[DONE]") return true;
    onData(checked(JSON.parse(text)));
    return false;
  });
}

// POST and read an NDJSON stream (Ollama's progress lines): onData(obj) per line.
export async function postNDJSON(path, data, signal, onData) {
  const res = await postStream(path, data, signal, null);
  const rest = await eachFrame(res, "\n", (line) => {
    if (line.trim()) onData(checked(JSON.parse(line)));
    return false;
  });
  if (rest.trim()) onData(checked(JSON.parse(rest)));
}

// Models of one kind ("generators", "embedders", ...) from the Antfly catalog.
export async function modelsOf(kind) {
  const cat = await getJSON("/ai/v1/models");
  return Object.keys(cat[kind] || {}).sort();
}

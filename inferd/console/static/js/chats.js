// The chat page's conversations, kept in localStorage under "inferd.chats":
// {current: id, list: [{id, title, updated, messages}]}, newest first. Export and import use
// {"inferd_conversations": 1, "conversations": [...]}, so a file can be moved between browsers.
const KEY = "inferd.chats";
const OLD = "inferd.chat";  // older consoles kept one conversation in the settings

const newId = () => "c" + Date.now().toString(36) + Math.random().toString(36).slice(2, 7);

function titleOf(messages) {
  const first = messages.find((m) => m.role === "user");
  if (!first) return "New chat";
  const c = first.content;
  const text = typeof c === "string" ? c : (c || []).filter((p) => p.type === "text").map((p) => p.text).join(" ");
  return (text.trim().split("\n")[0] || "Image").slice(0, 60);
}

function valid(c) {
  return c && typeof c === "object" && Array.isArray(c.messages) &&
    c.messages.every((m) => m && ["user", "assistant", "system", "tool"].includes(m.role));
}

export class Chats {
  constructor() {
    let data = null;
    try { data = JSON.parse(localStorage.getItem(KEY) || "null"); } catch { data = null; }
    this.list = data && Array.isArray(data.list) ? data.list.filter(valid) : [];
    if (!this.list.length) {
      let old = [];
      try { old = (JSON.parse(localStorage.getItem(OLD) || "{}").messages) || []; } catch { old = []; }
      this.list.push(this.fresh(old));
    }
    this.current = this.list.find((c) => c.id === (data && data.current)) || this.list[0];
    this.save();
  }

  fresh(messages = []) {
    return { id: newId(), title: titleOf(messages), named: false, updated: Date.now(), messages };
  }

  // Images make conversations large; when the browser's quota (about 5 MB) is reached they
  // are kept for this session only and the stored copy has their text alone (this.note says so).
  save() {
    const data = { current: this.current.id, list: this.list };
    this.note = "";
    try { localStorage.setItem(KEY, JSON.stringify(data)); return; } catch (e) { if (e.name !== "QuotaExceededError") throw e; }
    const strip = (m) => (typeof m.content === "string" ? m
      : { ...m, content: m.content.filter((p) => p.type !== "image_url").map((p) => p.text || "").join("\n") });
    try {
      localStorage.setItem(KEY, JSON.stringify({ ...data, list: this.list.map((c) => ({ ...c, messages: c.messages.map(strip) })) }));
      this.note = "the browser's storage is full: attached images are not kept after a reload";
    } catch { this.note = "the browser's storage is full: this conversation is not kept after a reload"; }
  }

  create() {
    if (!this.current.messages.length) return this.current;  // no pile of empty chats
    this.current = this.fresh();
    this.list.unshift(this.current);
    this.save();
    return this.current;
  }

  select(id) { this.current = this.list.find((c) => c.id === id) || this.current; this.save(); }

  setMessages(messages) {
    const c = this.current;
    c.messages = messages;
    if (!c.named) c.title = titleOf(messages);
    this.touch(c.id);
  }

  touch(id) {
    const c = this.list.find((x) => x.id === id);
    if (c) c.updated = Date.now();
    this.save();
  }

  rename(id, title) {
    const c = this.list.find((x) => x.id === id);
    if (c) { c.title = title.slice(0, 200); c.named = true; }
    this.save();
  }

  remove(id) {
    this.list = this.list.filter((c) => c.id !== id);
    if (!this.list.length) this.list.push(this.fresh());
    if (this.current.id === id) this.current = this.list[0];
    this.save();
  }

  // Newest first; q matches the title or any message text.
  search(q) {
    const hay = (c) => (c.title + "\n" + c.messages.map((m) => typeof m.content === "string" ? m.content
      : (m.content || []).map((p) => p.text || "").join(" ")).join("\n")).toLowerCase();
    return [...this.list].sort((a, b) => b.updated - a.updated).filter((c) => !q || hay(c).includes(q));
  }

  export() { return { inferd_conversations: 1, conversations: this.list }; }

  // Adds the file's conversations (new ids: importing twice keeps both copies) and opens the first.
  import(data) {
    const list = data && Array.isArray(data.conversations) ? data.conversations : null;
    if (!list || !list.length) throw new Error("not an exported conversation file (no \"conversations\" list)");
    const bad = list.findIndex((c) => !valid(c));
    if (bad >= 0) throw new Error(`conversation ${bad} has no valid "messages" list`);
    const added = list.map((c) => ({ ...this.fresh(c.messages), title: String(c.title || titleOf(c.messages)),
                                     named: !!c.named, updated: Number(c.updated) || Date.now() }));
    this.list = [...added, ...this.list.filter((c) => c.messages.length)];
    this.current = added[0];
    this.save();
  }
}

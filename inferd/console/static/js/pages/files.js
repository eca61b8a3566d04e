// Files: /v1/files upload (multipart), list, download and delete; the ids (file-...) are what
// the chat, read and speech routes take in place of inline bytes.
import { getJSON, request, errorText } from "../api.js";
import { el, field, human, select, showError } from "../ui.js";

export default {
  id: "files",
  title: "Files",
  mount(root) {
    const err = el("div", { class: "error", role: "alert" });
    const file = el("input", { id: "fl-file", type: "file", accept: "image/*,audio/*" });
    const purpose = select(["vision", "user_data", "assistants", "batch", "fine-tune", "evals"], "vision");
    purpose.id = "fl-purpose";
    const go = el("button", { id: "fl-upload", text: "Upload" });
    const rows = el("tbody", { id: "fl-rows" });
    const info = el("div", { class: "muted", id: "fl-info" });
    root.append(el("h1", { text: "Files" }), el("div", { class: "card" },
      field("File (an image or audio)", file), field("Purpose", purpose), el("div", { class: "row" }, go), err),
      el("div", { class: "card scroll" }, info, el("table", {}, el("thead", {}, el("tr", {},
        ...["Id", "Name", "Type", "Size", "Purpose", "Created", ""].map((h) => el("th", { text: h })))), rows)));

    async function call(path, opts) {
      const res = await request(path, opts);
      const body = await res.json().catch(() => null);
      if (!res.ok) throw new Error(errorText(body, res.status));
      return body;
    }
    async function download(f) {
      try {
        const res = await request(`/v1/files/${f.id}/content`);
        if (!res.ok) throw new Error(errorText(await res.json().catch(() => null), res.status));
        const url = URL.createObjectURL(await res.blob());
        const a = el("a", { href: url, download: f.filename });
        document.body.append(a); a.click(); a.remove();
        setTimeout(() => URL.revokeObjectURL(url), 1000);
      } catch (e) { showError(err, e); }
    }
    async function refresh() {
      try {
        const body = await getJSON("/v1/files");
        rows.replaceChildren(...body.data.map((f) => el("tr", { "data-id": f.id },
          el("td", { class: "mono", text: f.id }), el("td", { text: f.filename }), el("td", { text: f.content_type || "-" }),
          el("td", { text: human(f.bytes) }), el("td", { text: f.purpose }),
          el("td", { text: new Date(f.created_at * 1000).toLocaleString() }),
          el("td", {}, el("button", { class: "secondary download", type: "button", text: "Download", onclick: () => download(f) }), " ",
             el("button", { class: "danger delete", type: "button", text: "Delete", "aria-label": `delete ${f.filename}`,
                            onclick: async (e) => {
                              e.target.disabled = true;
                              try { await call(`/v1/files/${f.id}`, { method: "DELETE" }); } catch (x) { showError(err, x); }
                              refresh();
                            } })))));
        info.textContent = `${body.data.length} files`;
      } catch (e) { showError(err, e); }
    }
    async function submit() {
      showError(err, null);
      const f = file.files[0];
      if (!f) { showError(err, "pick a file first"); return; }
      const form = new FormData();
      form.append("purpose", purpose.value);
      form.append("file", f, f.name);
      go.disabled = true;
      try { await call("/v1/files", { method: "POST", body: form }); file.value = ""; } catch (e) { showError(err, e); }
      finally { go.disabled = false; }
      refresh();
    }
    go.addEventListener("click", submit);
    refresh();
    return { submit };
  },
};

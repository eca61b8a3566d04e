// Chunking: /ai/v1/chunk, with each chunk's span of the text highlighted and numbered.
import { modelsOf, postJSON } from "../api.js";
import { el, field, showError } from "../ui.js";

export default {
  id: "chunking",
  title: "Chunking",
  mount(root) {
    const err = el("div", { class: "error", role: "alert" });
    const model = el("select", { id: "ch-model" });
    const text = el("textarea", { id: "ch-text", rows: 8 });
    text.value = "Rain forms when water vapour condenses. Drops grow until they fall.\n\n" +
                 "Bread needs flour, water, salt and yeast. Knead it, let it rise, then bake it.\n\n" +
                 "Rivers carry the water back to the sea, where the cycle starts again.";
    const target = el("input", { id: "ch-target", type: "number", value: "20" });
    const overlap = el("input", { id: "ch-overlap", type: "number", value: "0" });
    const go = el("button", { id: "ch-run", text: "Chunk" });
    const info = el("div", { class: "muted" });
    const out = el("div", { id: "ch-out", class: "chunked" });
    root.append(el("h1", { text: "Chunking" }), el("div", { class: "card" }, field("Chunker", model),
      field("Text", text), el("div", { class: "row" }, field("Target tokens", target), field("Overlap tokens", overlap)),
      el("div", { class: "row" }, go, info), err), el("div", { class: "card" }, out));
    modelsOf("chunkers").then((ms) => model.replaceChildren(...ms.map((m) => el("option", { value: m, text: m }))))
      .catch((e) => showError(err, e));

    async function submit() {
      showError(err, null);
      go.disabled = true;
      const src = text.value;
      try {
        const { body } = await postJSON("/ai/v1/chunk", { input: src, config: { model: model.value,
          text: { target_tokens: Number(target.value), overlap_tokens: Number(overlap.value) } } });
        info.textContent = `${body.data.length} chunks (model ${body.model})`;
        // Each character belongs to the last chunk that starts at or before it; a mark per start.
        const parts = [];
        body.data.forEach((c, i) => {
          const next = body.data[i + 1];
          const end = next ? Math.min(c.end_char, next.start_char) : c.end_char;
          parts.push(el("span", { class: `chunk c${i % 2}`, "data-start": c.start_char, "data-end": c.end_char },
            el("mark", { text: String(i + 1) }), src.slice(c.start_char, Math.max(c.start_char, end))));
          if (next && next.start_char > c.end_char) parts.push(src.slice(c.end_char, next.start_char));
        });
        out.replaceChildren(...parts);
      } catch (e) { showError(err, e); } finally { go.disabled = false; }
    }
    go.addEventListener("click", submit);
    return { submit };
  },
};

// Rewrite: inputs (one per line) -> /ai/v1/rewrite (seq2seq: T5, BART, ...) -> each input's texts.
import { modelsOf, postJSON } from "../api.js";
import { el, field, showError } from "../ui.js";

export default {
  id: "rewrite",
  title: "Rewrite",
  mount(root) {
    const err = el("div", { class: "error", role: "alert" });
    const model = el("select", { id: "rw-model" });
    const inputs = el("textarea", { id: "rw-inputs", rows: 4 });
    inputs.value = "paraphrase: batching raises throughput";
    const maxTokens = el("input", { id: "rw-max-tokens", type: "number", min: "1", value: "32" });
    const beams = el("input", { id: "rw-beams", type: "number", min: "1", max: "16", value: "1" });
    const go = el("button", { id: "rw-run", text: "Rewrite" });
    const out = el("ol", { id: "rw-out" });
    root.append(el("h1", { text: "Rewrite" }), el("div", { class: "card" }, field("Rewriter", model),
      field("Inputs, one per line (as the model expects them, e.g. \"summarize: ...\")", inputs),
      el("div", { class: "row" }, field("Max tokens", maxTokens), field("Beams (and texts per input)", beams)),
      el("div", { class: "row" }, go), err), el("div", { class: "card" }, out));
    modelsOf("rewriters").then((ms) => {
      model.replaceChildren(...ms.map((m) => el("option", { value: m, text: m })));
      if (!ms.length) out.replaceChildren(el("li", { class: "muted", text: "No rewriter is served (put a seq2seq model under rewriters/)." }));
    }).catch((e) => showError(err, e));

    async function submit() {
      showError(err, null);
      const list = inputs.value.split("\n").map((t) => t.trim()).filter(Boolean);
      if (!list.length || !model.value) return;
      const n = Number(beams.value || 1);
      go.disabled = true;
      try {
        const { body } = await postJSON("/ai/v1/rewrite", { model: model.value, inputs: list, max_tokens: Number(maxTokens.value),
                                                            num_beams: n, num_return_sequences: n });
        out.replaceChildren(...body.data.map((d) => el("li", { "data-index": d.index },
          el("div", { class: "muted", text: list[d.index] }),
          el("ul", {}, ...d.texts.map((t) => el("li", { class: "rewrite-text", text: t }))))));
      } catch (e) { showError(err, e); } finally { go.disabled = false; }
    }
    go.addEventListener("click", submit);
    return { submit };
  },
};

// Embeddings: a few texts -> /v1/embeddings -> their cosine-similarity matrix as a heat map.
import { modelsOf, postJSON } from "../api.js";
import { el, field, showError } from "../ui.js";

export function cosine(a, b) {
  let dot = 0, na = 0, nb = 0;
  for (let i = 0; i < a.length; i++) { dot += a[i] * b[i]; na += a[i] * a[i]; nb += b[i] * b[i]; }
  return na && nb ? dot / Math.sqrt(na * nb) : 0;
}

function heat(v) {  // -1..1 -> white..blue
  const t = Math.max(0, Math.min(1, (v + 1) / 2));
  return `rgba(47, 111, 222, ${(t * t).toFixed(3)})`;
}

export default {
  id: "embeddings",
  title: "Embeddings",
  mount(root) {
    const err = el("div", { class: "error", role: "alert" });
    const model = el("select", { id: "emb-model" });
    const texts = el("textarea", { id: "emb-texts", rows: 6 });
    texts.value = "A man is eating food.\nA man is eating bread.\nThe girl is carrying a baby.\nA man is riding a horse.";
    const go = el("button", { id: "emb-run", text: "Compare" });
    const out = el("div", { id: "emb-matrix", class: "scroll" });
    const info = el("div", { class: "muted" });
    root.append(el("h1", { text: "Embeddings" }), el("div", { class: "card" },
      field("Embedder", model), field("Texts, one per line", texts), el("div", { class: "row" }, go, info), err),
      el("div", { class: "card" }, out));
    modelsOf("embedders").then((ms) => model.replaceChildren(...ms.map((m) => el("option", { value: m, text: m }))))
      .catch((e) => showError(err, e));

    async function submit() {
      showError(err, null);
      const input = texts.value.split("\n").map((t) => t.trim()).filter(Boolean);
      if (!input.length) return;
      go.disabled = true;
      const t0 = performance.now();
      try {
        const { body } = await postJSON("/v1/embeddings", { model: model.value, input });
        const vecs = body.data.sort((a, b) => a.index - b.index).map((d) => d.embedding);
        info.textContent = `${vecs.length} vectors of ${vecs[0].length} dimensions, ` +
          `${body.usage.prompt_tokens} tokens, ${Math.round(performance.now() - t0)} ms`;
        const short = (t) => (t.length > 28 ? t.slice(0, 27) + "…" : t);
        const table = el("table", { class: "heat" },
          el("tr", {}, el("th"), ...input.map((t, j) => el("th", { title: t, text: `#${j + 1}` }))),
          ...input.map((t, i) => el("tr", {}, el("th", { title: t, text: `#${i + 1} ${short(t)}` }),
            ...input.map((_, j) => {
              const v = cosine(vecs[i], vecs[j]);
              return el("td", { "data-value": v.toFixed(4), style: { background: heat(v) }, text: v.toFixed(2) });
            }))));
        out.replaceChildren(table);
      } catch (e) { showError(err, e); } finally { go.disabled = false; }
    }
    go.addEventListener("click", submit);
    return { submit };
  },
};

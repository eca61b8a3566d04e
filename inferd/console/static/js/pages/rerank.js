// Rerank: a query and documents -> /v1/rerank -> documents by score, as bars.
import { modelsOf, postJSON } from "../api.js";
import { el, field, showError } from "../ui.js";

export default {
  id: "rerank",
  title: "Rerank",
  mount(root) {
    const err = el("div", { class: "error", role: "alert" });
    const model = el("select", { id: "rr-model" });
    const query = el("input", { id: "rr-query", value: "what causes rain" });
    const docs = el("textarea", { id: "rr-docs", rows: 6 });
    docs.value = "Rain falls when water vapour in clouds condenses into drops.\nBake the bread for forty minutes.\n" +
                 "Clouds form as warm moist air rises and cools.";
    const go = el("button", { id: "rr-run", text: "Rerank" });
    const out = el("div", { id: "rr-results" });
    root.append(el("h1", { text: "Rerank" }), el("div", { class: "card" }, field("Reranker", model),
      field("Query", query), field("Documents, one per line", docs), el("div", { class: "row" }, go), err),
      el("div", { class: "card" }, out));
    modelsOf("rerankers").then((ms) => {
      model.replaceChildren(...ms.map((m) => el("option", { value: m, text: m })));
      if (!ms.length) out.textContent = "No reranker is served (put one under rerankers/ in the models folder).";
    }).catch((e) => showError(err, e));

    async function submit() {
      showError(err, null);
      const documents = docs.value.split("\n").map((t) => t.trim()).filter(Boolean);
      if (!documents.length || !model.value) return;
      go.disabled = true;
      try {
        const { body } = await postJSON("/v1/rerank", { model: model.value, query: query.value, documents });
        const scores = body.results.map((r) => r.relevance_score);
        const lo = Math.min(...scores), hi = Math.max(...scores);
        out.replaceChildren(el("table", { class: "bars" }, ...body.results.map((r) => {
          const w = hi > lo ? 5 + 95 * (r.relevance_score - lo) / (hi - lo) : 100;
          return el("tr", { "data-index": r.index, "data-score": r.relevance_score },
            el("td", { text: documents[r.index] }),
            el("td", {}, el("div", { class: "bar", style: { width: `${w.toFixed(1)}%` } })),
            el("td", { text: r.relevance_score.toFixed(3) }));
        })));
      } catch (e) { showError(err, e); } finally { go.disabled = false; }
    }
    go.addEventListener("click", submit);
    return { submit };
  },
};

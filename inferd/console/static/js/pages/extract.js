// Extract: text + entity labels -> /ai/v1/extract -> the entities highlighted in the text
// (a <mark> per span, labelled), relations and classifications listed, structures as JSON.
import { getJSON, postJSON } from "../api.js";
import { el, field, showError } from "../ui.js";

const SAMPLE = "Tim Cook met Angela Merkel in Berlin on Monday; Apple paid $2 billion.";

export default {
  id: "extract",
  title: "Extract",
  mount(root) {
    const err = el("div", { class: "error", role: "alert" });
    const model = el("select", { id: "ex-model" });
    const text = el("textarea", { id: "ex-text", rows: 5 });
    text.value = SAMPLE;
    const labels = el("input", { id: "ex-labels", value: "PERSON, ORG, GPE, DATE, MONEY" });
    const structures = el("textarea", { id: "ex-structures", rows: 3,
                                        placeholder: '{"meeting": {"fields": {"who": "string[]", "where": "string"}}} (needs a generator)' });
    const threshold = el("input", { id: "ex-threshold", type: "number", step: "0.05", min: "0", max: "1", value: "0.5" });
    const go = el("button", { id: "ex-run", text: "Extract" });
    const out = el("div", { id: "ex-out", class: "chunked" });
    const lists = el("div", { id: "ex-lists" });
    root.append(el("h1", { text: "Extract" }), el("div", { class: "card" }, field("Model", model), field("Text", text),
      field("Entity labels, comma separated", labels), field("Structures (JSON, optional)", structures),
      field("Threshold", threshold), el("div", { class: "row" }, go), err),
      el("div", { class: "card" }, out, lists));
    getJSON("/ai/v1/models").then((cat) => {
      const ms = [...Object.keys(cat.extractors || {}), ...Object.keys(cat.classifiers || {})].sort();
      model.replaceChildren(el("option", { value: "", text: "(the server's choice)" }),
                            ...ms.map((m) => el("option", { value: m, text: m })));
      if (ms.length === 1) model.value = ms[0];
    }).catch((e) => showError(err, e));

    async function submit() {
      showError(err, null);
      const content = text.value;
      const schema = {};
      const ents = labels.value.split(",").map((s) => s.trim()).filter(Boolean);
      if (ents.length) schema.entities = ents;
      try { if (structures.value.trim()) schema.structures = JSON.parse(structures.value); }
      catch (e) { showError(err, `structures is not valid JSON: ${e.message}`); return; }
      const req = { inputs: [{ content }], schema, options: { threshold: Number(threshold.value || 0.5) } };
      if (model.value) req.model = model.value;
      go.disabled = true;
      try {
        const { body } = await postJSON("/ai/v1/extract", req);
        const d = body.data[0];
        const spans = [...(d.entities || [])].filter((e) => e.start !== undefined).sort((a, b) => a.start - b.start);
        const parts = [];
        let at = 0;
        for (const e of spans) {
          if (e.start < at) continue;  // nested spans (flat_ner false): the outer one is shown
          parts.push(content.slice(at, e.start));
          parts.push(el("mark", { class: "entity", "data-label": e.label, title: `${e.label} ${(e.score ?? 1).toFixed(2)}` },
            content.slice(e.start, e.end), el("span", { class: "entity-label", text: e.label })));
          at = e.end;
        }
        parts.push(content.slice(at));
        out.replaceChildren(...parts);
        lists.replaceChildren();
        if (d.relations && d.relations.length) {
          lists.append(el("h2", { text: "Relations" }), el("ul", {}, ...d.relations.map((r) => el("li", {
            text: `${d.entities[r.source]?.text ?? r.source} — ${r.type} → ${d.entities[r.target]?.text ?? r.target}` }))));
        }
        if (d.classifications && d.classifications.length) {
          lists.append(el("h2", { text: "Classifications" }), el("pre", { class: "plain", text: JSON.stringify(d.classifications, null, 2) }));
        }
        if (d.structures && Object.keys(d.structures).length) {
          lists.append(el("h2", { text: "Structures" }), el("pre", { class: "plain", text: JSON.stringify(d.structures, null, 2) }));
        }
        lists.append(el("div", { class: "muted", text: `${spans.length} entities · ${body.model}` }));
      } catch (e) { showError(err, e); } finally { go.disabled = false; }
    }
    go.addEventListener("click", submit);
    return { submit };
  },
};

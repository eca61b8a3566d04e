// Tabular: a form built from a predictor's feature names -> /ml/v1/predict.
import { getJSON, postJSON } from "../api.js";
import { el, field, showError } from "../ui.js";

export default {
  id: "tabular",
  title: "Tabular",
  mount(root) {
    const err = el("div", { class: "error", role: "alert" });
    const model = el("select", { id: "tab-model" });
    const form = el("div", { id: "tab-form", class: "row" });
    const go = el("button", { id: "tab-run", text: "Predict" });
    const out = el("div", { id: "tab-out" });
    root.append(el("h1", { text: "Tabular" }), el("div", { class: "card" }, field("Predictor", model), form,
      el("div", { class: "row" }, go), err), el("div", { class: "card" }, out));
    let info = {};
    const build = () => {
      const p = info[model.value];
      form.replaceChildren(...(p ? p.feature_names : []).map((f, i) =>
        field(f, el("input", { type: "number", step: "any", "data-feature": i, value: "0" }))));
    };
    getJSON("/ml/v1/predictors").then((b) => {
      info = b.predictors || {};
      model.replaceChildren(...Object.keys(info).sort().map((m) => el("option", { value: m, text: m })));
      build();
    }).catch((e) => showError(err, e));
    model.addEventListener("change", build);

    async function submit() {
      showError(err, null);
      const p = info[model.value];
      if (!p) return;
      const row = [...form.querySelectorAll("input")].map((i) => (i.value === "" ? null : Number(i.value)));
      try {
        const { body } = await postJSON("/ml/v1/predict", { model: model.value, input: [row] });
        const pred = body.predictions[0];
        const names = p.outputs || pred.map((_, i) => `output ${i}`);
        const hi = Math.max(...pred.map(Math.abs), 1e-9);
        out.replaceChildren(el("div", { class: "muted", text: `task: ${body.task}` }),
          el("table", { class: "bars" }, ...pred.map((v, i) => el("tr", { "data-output": names[i] },
            el("td", { text: names[i] }),
            el("td", {}, el("div", { class: "bar", style: { width: `${(100 * Math.abs(v) / hi).toFixed(1)}%` } })),
            el("td", { text: Number(v).toFixed(4) })))));
      } catch (e) { showError(err, e); }
    }
    go.addEventListener("click", submit);
    return { submit };
  },
};

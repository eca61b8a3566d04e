// Read: an image -> /ai/v1/read (as a data URI) -> the text, and each region's box drawn over
// the image (an SVG layer in the image's own pixel coordinates) with its text and confidence.
import { modelsOf, postJSON } from "../api.js";
import { el, field, showError } from "../ui.js";

const SVG = "http://www.w3.org/2000/svg";
const svg = (tag, attrs) => {
  const n = document.createElementNS(SVG, tag);
  for (const [k, v] of Object.entries(attrs)) n.setAttribute(k, v);
  return n;
};

export default {
  id: "read",
  title: "Read",
  mount(root) {
    const err = el("div", { class: "error", role: "alert" });
    const model = el("select", { id: "rd-model" });
    const file = el("input", { id: "rd-file", type: "file", accept: "image/*" });
    const prompt = el("input", { id: "rd-prompt", placeholder: "optional (document models: a task prompt)" });
    const go = el("button", { id: "rd-run", text: "Read" });
    const stage = el("div", { class: "ocr-stage", id: "rd-stage" });
    const text = el("pre", { id: "rd-text", class: "plain" });
    const regions = el("ol", { id: "rd-regions" });
    root.append(el("h1", { text: "Read" }), el("div", { class: "card" }, field("Reader", model),
      field("Image (PNG, JPEG, WebP, GIF, BMP)", file), field("Prompt", prompt), el("div", { class: "row" }, go), err),
      el("div", { class: "grid wide" }, el("div", { class: "card" }, stage),
         el("div", { class: "card" }, el("h2", { text: "Text" }), text, el("h2", { text: "Regions" }), regions)));
    modelsOf("readers").then((ms) => {
      model.replaceChildren(...ms.map((m) => el("option", { value: m, text: m })));
      if (!ms.length) stage.textContent = "No reader is served.";
    }).catch((e) => showError(err, e));

    let uri = null;
    file.addEventListener("change", () => {
      const f = file.files[0];
      if (!f) return;
      const r = new FileReader();
      r.onload = () => { uri = r.result; stage.replaceChildren(el("img", { id: "rd-image", src: uri, alt: "the image to read" })); };
      r.readAsDataURL(f);
    });

    async function submit() {
      showError(err, null);
      if (!uri) { showError(err, "pick an image first"); return; }
      if (!model.value) return;
      go.disabled = true;
      try {
        const req = { model: model.value, images: [{ url: uri }] };
        if (prompt.value.trim()) req.prompt = prompt.value.trim();
        const { body } = await postJSON("/ai/v1/read", req);
        const d = body.data[0];
        text.textContent = d.text || "";
        const img = stage.querySelector("img");
        const w = img.naturalWidth, h = img.naturalHeight;
        const layer = svg("svg", { class: "boxes", viewBox: `0 0 ${w} ${h}`, preserveAspectRatio: "none", role: "img",
                                   "aria-label": `${(d.regions || []).length} text regions` });
        (d.regions || []).forEach((g, i) => {
          const [x1, y1, x2, y2] = g.bbox;
          const rect = svg("rect", { x: x1, y: y1, width: x2 - x1, height: y2 - y1, class: "box", "data-index": i });
          const t = svg("title", {});
          t.textContent = `${g.text} (${(g.confidence ?? 1).toFixed(2)})`;
          rect.append(t);
          const label = svg("text", { x: x1, y: Math.max(10, y1 - 3), class: "box-label" });
          label.textContent = String(i + 1);
          layer.append(rect, label);
        });
        stage.querySelector("svg")?.remove();
        stage.append(layer);
        regions.replaceChildren(...(d.regions || []).map((g) => el("li", {}, g.text,
          el("span", { class: "muted", text: g.confidence !== undefined ? `  ${g.confidence.toFixed(3)}` : "" }))));
        if (d.fields) regions.append(el("pre", { class: "plain", text: JSON.stringify(d.fields, null, 2) }));
      } catch (e) { showError(err, e); } finally { go.disabled = false; }
    }
    go.addEventListener("click", submit);
    return { submit };
  },
};

// A small Markdown renderer that builds DOM nodes and never parses HTML: every piece of the
// model's text reaches the page through textContent, so `<img onerror=...>` in an answer is
// shown as text and no element is ever made from it. Covers what chat answers use:
// paragraphs, headings, bullet and numbered lists, block quotes, rules, fenced code blocks
// (highlighted, with a copy button), inline code, **bold**, *emphasis*, ~~strike~~, http(s) links
// and math: `$...$` inline, `$$...$$` displayed (math.js: a TeX subset to MathML). A `$` that
// opens or closes with a space, or closes before a digit ("$5 and $10"), is a dollar sign.
import { highlight } from "./highlight.js";
import { mathml } from "./math.js";
import { el } from "./ui.js";

const FENCE = /^\s*(```+|~~~+)\s*([\w+#.-]*)\s*$/;
const BULLET = /^(\s*)([-*+])\s+(.*)$/;
const NUMBER = /^(\s*)(\d{1,9})[.)]\s+(.*)$/;
const HEADING = /^(#{1,6})\s+(.*?)\s*#*\s*$/;
const RULE = /^\s*([-*_])(\s*\1){2,}\s*$/;

// Inline: code spans first (their content is literal), then links, then emphasis.
const INLINE = /(`+)([\s\S]*?[^`])\1(?!`)|\[([^\]\n]+)\]\((https?:\/\/[^\s)]+)\)|\*\*([^*\n][\s\S]*?)\*\*|__([^_\n][\s\S]*?)__|~~([^~\n][\s\S]*?)~~|\*([^*\s][^*\n]*?)\*|(?<![\w])_([^_\s][^_\n]*?)_(?![\w])|\$\$([^$]+?)\$\$|(?<![\w$\\])\$(?![\s$])([^$\n]*?[^\s$\\])\$(?![\w$])/;

export function inline(text) {
  const out = [];
  let rest = text;
  while (rest) {
    const m = INLINE.exec(rest);
    if (!m) { out.push(document.createTextNode(rest)); break; }
    if (m.index) out.push(document.createTextNode(rest.slice(0, m.index)));
    if (m[1]) out.push(el("code", { text: m[2].replace(/^ (.*) $/, "$1") }));
    else if (m[3]) out.push(el("a", { href: m[4], target: "_blank", rel: "noopener noreferrer" }, ...inline(m[3])));
    else if (m[5] || m[6]) out.push(el("strong", {}, ...inline(m[5] || m[6])));
    else if (m[7]) out.push(el("del", {}, ...inline(m[7])));
    else if (m[10]) out.push(mathml(m[10].trim(), true));
    else if (m[11]) out.push(mathml(m[11]));
    else out.push(el("em", {}, ...inline(m[8] || m[9])));
    rest = rest.slice(m.index + m[0].length);
  }
  return out;
}

function codeBlock(lang, code) {
  const copy = el("button", { class: "copy secondary", type: "button", text: "Copy", title: "copy the code" });
  copy.addEventListener("click", async () => {
    try { await navigator.clipboard.writeText(code); copy.textContent = "Copied"; }
    catch { copy.textContent = "Copy failed"; }
    setTimeout(() => { copy.textContent = "Copy"; }, 1500);
  });
  return el("div", { class: "codeblock" },
    el("div", { class: "codebar" }, el("span", { class: "lang", text: lang || "code" }), copy),
    el("pre", {}, el("code", { class: lang ? `language-${lang}` : null }, ...highlight(lang, code))));
}

function list(lines, start) {
  // lines: [{indent, ordered, num, text}] of one list; nested by indentation.
  const first = lines[start];
  const node = el(first.ordered ? "ol" : "ul", { start: first.ordered && first.num !== 1 ? first.num : null });
  let i = start;
  while (i < lines.length && lines[i].indent >= first.indent) {
    const it = lines[i];
    if (it.indent > first.indent) {  // a deeper list belongs to the previous item
      const [sub, next] = list(lines, i);
      (node.lastChild || node.appendChild(el("li"))).append(sub);
      i = next;
      continue;
    }
    if (it.ordered !== first.ordered) break;
    node.append(el("li", {}, ...inline(it.text)));
    i++;
  }
  return [node, i];
}

export function render(src) {
  const frag = document.createDocumentFragment();
  const lines = String(src || "").replace(/\r\n?/g, "\n").split("\n");
  let para = [];
  const flush = () => {
    if (para.length) frag.append(el("p", {}, ...inline(para.join("\n"))));
    para = [];
  };
  for (let i = 0; i < lines.length;) {
    const line = lines[i];
    let m;
    if ((m = FENCE.exec(line))) {
      flush();
      const body = [];
      i++;
      // An unclosed fence (still streaming) runs to the end.
      while (i < lines.length && !(lines[i].trim().startsWith(m[1]) && FENCE.test(lines[i]))) body.push(lines[i++]);
      i++;
      frag.append(codeBlock(m[2], body.join("\n")));
    } else if (!line.trim()) { flush(); i++; }
    else if ((m = HEADING.exec(line))) { flush(); frag.append(el(`h${Math.min(6, m[1].length + 2)}`, {}, ...inline(m[2]))); i++; }
    else if (RULE.test(line) && !para.length) { flush(); frag.append(el("hr")); i++; }
    else if (BULLET.test(line) || NUMBER.test(line)) {
      flush();
      const items = [];
      while (i < lines.length) {
        const b = BULLET.exec(lines[i]), n = b ? null : NUMBER.exec(lines[i]);
        if (b) items.push({ indent: b[1].length, ordered: false, text: b[3] });
        else if (n) items.push({ indent: n[1].length, ordered: true, num: Number(n[2]), text: n[3] });
        else if (lines[i].trim() && /^\s{2,}/.test(lines[i]) && items.length) items[items.length - 1].text += "\n" + lines[i].trim();
        else break;
        i++;
      }
      for (let k = 0; k < items.length;) { const [node, next] = list(items, k); frag.append(node); k = next; }
    } else if (/^\s*>/.test(line)) {
      flush();
      const quoted = [];
      while (i < lines.length && /^\s*>/.test(lines[i])) quoted.push(lines[i++].replace(/^\s*>\s?/, ""));
      frag.append(el("blockquote", {}, render(quoted.join("\n"))));
    } else { para.push(line); i++; }
  }
  flush();
  return frag;
}

// A small syntax highlighter for code blocks: comments, strings, numbers and keywords of the
// common languages, as <span class="tok-..."> around text nodes (never HTML), so the block's
// textContent stays exactly the code. Unknown languages get strings, numbers and comments.
const KW = {
  py: "and as assert async await break class continue def del elif else except False finally for from global if import in is lambda None nonlocal not or pass raise return True try while with yield match case self",
  js: "async await break case catch class const continue default delete do else export extends false finally for from function if import in instanceof let new null of return static super switch this throw true try typeof undefined var void while yield",
  c: "auto bool break case char const continue default do double else enum extern false float for goto if inline int long nullptr register return short signed sizeof static struct switch true typedef union unsigned void volatile while class public private protected namespace template typename using virtual new delete fn let mut impl pub use mod match self Self trait where loop move ref as crate super dyn type func package var range defer go chan map interface select",
  sh: "if then else elif fi for while do done case esac in function return export local echo exit set unset cd",
  sql: "select from where and or not insert into values update set delete create table drop alter join left right inner outer on group by order having limit as null is in like distinct union all primary key",
};
const ALIAS = { python: "py", javascript: "js", ts: "js", typescript: "js", json: "js", jsx: "js", tsx: "js",
                bash: "sh", shell: "sh", zsh: "sh", console: "sh", cpp: "c", "c++": "c", java: "c", rust: "c",
                rs: "c", go: "c", cs: "c", csharp: "c", kotlin: "c", swift: "c", sql: "sql" };
const HASH = new Set(["py", "sh"]);  // languages whose comments start with #

export function highlight(lang, code) {
  const l = ALIAS[(lang || "").toLowerCase()] || (KW[(lang || "").toLowerCase()] ? lang.toLowerCase() : "");
  const kws = new Set((KW[l] || "").split(" ").filter(Boolean));
  const comment = HASH.has(l) ? "#[^\\n]*" : l === "sql" ? "--[^\\n]*" : "\\/\\/[^\\n]*|\\/\\*[\\s\\S]*?\\*\\/";
  const re = new RegExp(`(${comment})|("(?:[^"\\\\\\n]|\\\\.)*"|'(?:[^'\\\\\\n]|\\\\.)*'|\`(?:[^\`\\\\]|\\\\.)*\`)|` +
                        "(\\b\\d[\\d_]*(?:\\.\\d+)?(?:e[+-]?\\d+)?\\b|\\b0x[\\da-f]+\\b)|([A-Za-z_$][\\w$]*)", "gi");
  const out = [];
  let at = 0;
  const span = (cls, text) => { const s = document.createElement("span"); s.className = cls; s.textContent = text; return s; };
  for (const m of code.matchAll(re)) {
    let node = null;
    if (m[1]) node = span("tok-com", m[0]);
    else if (m[2]) node = span("tok-str", m[0]);
    else if (m[3]) node = span("tok-num", m[0]);
    else if (m[4] && (kws.has(m[4]) || (l === "sql" && kws.has(m[4].toLowerCase())))) node = span("tok-kw", m[0]);
    if (!node) continue;
    if (m.index > at) out.push(document.createTextNode(code.slice(at, m.index)));
    out.push(node);
    at = m.index + m[0].length;
  }
  if (at < code.length) out.push(document.createTextNode(code.slice(at)));
  return out;
}

// A small TeX subset to MathML (Chromium renders MathML Core), for `$...$` and `$$...$$` in
// chat answers. Builds elements with createElementNS and sets only textContent, so nothing in
// the model's text becomes markup. Covers what answers use: letters, numbers, operators,
// ^ and _ (with {groups}), \frac, \sqrt (and \sqrt[n]), \text, \left / \right, Greek letters,
// common symbols and function names. An unknown command is shown as its name.
const NS = "http://www.w3.org/1998/Math/MathML";

const GREEK = "alpha beta gamma delta epsilon zeta eta theta iota kappa lambda mu nu xi omicron pi rho sigma tau upsilon phi chi psi omega";
const LETTERS = {};
GREEK.split(" ").forEach((n, i) => {
  LETTERS[n] = String.fromCodePoint(0x3b1 + i + (i >= 17 ? 1 : 0));  // (skips the final sigma, U+03C2)
  LETTERS[n[0].toUpperCase() + n.slice(1)] = String.fromCodePoint(0x391 + i + (i >= 17 ? 1 : 0));
});
Object.assign(LETTERS, { varepsilon: "\u03b5", varphi: "\u03c6", vartheta: "\u03d1", ell: "\u2113", infty: "\u221e",
                         partial: "\u2202", nabla: "\u2207", hbar: "\u210f", emptyset: "\u2205" });
const OPS = { cdot: "\u22c5", times: "\u00d7", div: "\u00f7", pm: "\u00b1", mp: "\u2213", le: "\u2264", leq: "\u2264",
              ge: "\u2265", geq: "\u2265", neq: "\u2260", ne: "\u2260", approx: "\u2248", equiv: "\u2261", sim: "\u223c",
              propto: "\u221d", to: "\u2192", rightarrow: "\u2192", leftarrow: "\u2190", Rightarrow: "\u21d2",
              iff: "\u21d4", in: "\u2208", notin: "\u2209", subset: "\u2282", subseteq: "\u2286", cup: "\u222a",
              cap: "\u2229", forall: "\u2200", exists: "\u2203", ldots: "\u2026", cdots: "\u22ef", dots: "\u2026",
              sum: "\u2211", prod: "\u220f", int: "\u222b", oint: "\u222e", lim: "lim", langle: "\u27e8", rangle: "\u27e9",
              "{": "{", "}": "}", ",": "\u2009", ";": "\u2005", "!": "", " ": "\u00a0", "|": "\u2016", "\\": "" };
const FUNCS = new Set(["sin", "cos", "tan", "cot", "sec", "csc", "log", "ln", "exp", "max", "min", "det", "gcd",
                       "arcsin", "arccos", "arctan", "sinh", "cosh", "tanh", "arg", "deg", "dim", "ker", "sup", "inf"]);
const VARIANTS = { mathbf: "bold", boldsymbol: "bold", mathbb: "double-struck", mathcal: "script", mathit: "italic" };
const TOKEN = /\\[a-zA-Z]+|\\.|[a-zA-Z]|\d+(?:\.\d+)?|\s+|[^]/gu;

function node(tag, text, ...kids) {
  const n = document.createElementNS(NS, tag);
  if (text !== null && text !== undefined) n.textContent = text;
  for (const k of kids) n.append(k);
  return n;
}

const row = (kids) => (kids.length === 1 ? kids[0] : node("mrow", null, ...kids));

class Parser {
  constructor(src) { this.t = src.match(TOKEN) || []; this.i = 0; }
  peek() { while (this.i < this.t.length && /^\s+$/.test(this.t[this.i])) this.i++; return this.t[this.i]; }
  next() { const t = this.peek(); this.i++; return t; }

  // Atoms up to `end` (a closing token, consumed) or the end of input.
  list(end) {
    const out = [];
    for (let t = this.peek(); t !== undefined; t = this.peek()) {
      if (t === end) { this.i++; break; }
      out.push(this.scripts(this.atom()));
    }
    return out;
  }

  // The argument of a command: a {group} or one token.
  arg() {
    const t = this.peek();
    if (t === undefined) return node("mrow");
    return this.atom();
  }

  scripts(base) {
    let sub = null, sup = null;
    for (let t = this.peek(); t === "^" || t === "_"; t = this.peek()) {
      this.i++;
      if (t === "^") sup = this.arg(); else sub = this.arg();
    }
    if (sub && sup) return node("msubsup", null, base, sub, sup);
    if (sub) return node("msub", null, base, sub);
    if (sup) return node("msup", null, base, sup);
    return base;
  }

  atom() {
    const t = this.next();
    if (t === "{") return row(this.list("}"));
    if (/^\d/.test(t)) return node("mn", t);
    if (/^[a-zA-Z]$/.test(t)) return node("mi", t);
    if (t[0] !== "\\") return node("mo", t);
    const name = t.slice(1);
    if (name === "frac" || name === "dfrac" || name === "tfrac") return node("mfrac", null, this.arg(), this.arg());
    if (name === "sqrt") {
      if (this.peek() === "[") {
        this.i++;
        const index = row(this.list("]"));
        return node("mroot", null, this.arg(), index);
      }
      return node("msqrt", null, this.arg());
    }
    if (name === "text" || name === "mathrm" || name === "operatorname") {
      if (this.peek() !== "{") return node("mtext", this.next() || "");
      this.i++;
      let s = "";
      for (let depth = 1; this.i < this.t.length; this.i++) {
        const x = this.t[this.i];
        if (x === "{") depth++;
        if (x === "}" && --depth === 0) { this.i++; break; }
        s += x;
      }
      return node(name === "text" ? "mtext" : "mi", s);
    }
    if (name === "left" || name === "right") {
      const d = this.next();
      return node("mo", d === "." || d === undefined ? "" : d.startsWith("\\") ? OPS[d.slice(1)] ?? d.slice(1) : d);
    }
    if (name in VARIANTS) { const a = this.arg(); a.setAttribute("mathvariant", VARIANTS[name]); return a; }
    if (name in LETTERS) return node("mi", LETTERS[name]);
    if (name in OPS) return node("mo", OPS[name]);
    if (FUNCS.has(name)) return node("mi", name);
    return node("mtext", name);  // unknown: its name, as text
  }
}

// A <math> element of `tex` (display: a block of its own).
export function mathml(tex, display = false) {
  const p = new Parser(tex);
  const kids = p.list(undefined);
  const m = node("math", null, row(kids));
  if (display) m.setAttribute("display", "block");
  return m;
}

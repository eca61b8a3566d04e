// The console shell: a nav from PAGES, hash routing (#/chat), keyboard shortcuts (listed in
// the "?" dialog), the theme switch (auto follows prefers-color-scheme) and a health indicator.
import { PAGES } from "./pages/index.js";
import { getJSON } from "./api.js";
import { el } from "./ui.js";

const nav = document.getElementById("nav"), main = document.getElementById("page");
let current = null;

function route() {
  const id = (location.hash.match(/^#\/([\w-]+)/) || [])[1] || PAGES[0].id;
  const page = PAGES.find((p) => p.id === id) || PAGES[0];
  if (current && current.unmount) current.unmount();
  main.replaceChildren();
  for (const a of nav.children) {
    a.classList.toggle("active", a.dataset.id === page.id);
    if (a.dataset.id === page.id) a.setAttribute("aria-current", "page"); else a.removeAttribute("aria-current");
  }
  document.title = `${page.title} · inferd`;
  current = page.mount(main) || {};
}

// Theme: "auto" (the CSS follows prefers-color-scheme), or a forced "light" / "dark".
const THEME = "inferd.theme", themes = ["auto", "light", "dark"];
const themeBtn = document.getElementById("theme");
function applyTheme(t) {
  if (t === "auto") delete document.documentElement.dataset.theme; else document.documentElement.dataset.theme = t;
  themeBtn.textContent = `theme: ${t}`;
}
applyTheme(themes.includes(localStorage.getItem(THEME)) ? localStorage.getItem(THEME) : "auto");
themeBtn.addEventListener("click", () => {
  const t = themes[(themes.indexOf(themeBtn.textContent.slice(7)) + 1) % themes.length];
  localStorage.setItem(THEME, t);
  applyTheme(t);
});

const keysDlg = document.getElementById("keysdlg");
document.getElementById("keys").addEventListener("click", () => keysDlg.showModal());

PAGES.forEach((p, i) => nav.append(el("a", { href: `#/${p.id}`, "data-id": p.id, text: p.title, hidden: !!p.needs,
                                              title: i < 9 ? `${p.title} (Alt+${i + 1})` : p.title })));
// A page that needs a kind (Speak: a speaker) is in the nav once the catalog lists one.
if (PAGES.some((p) => p.needs)) {
  getJSON("/ai/v1/models").then((cat) => {
    for (const p of PAGES.filter((x) => x.needs)) {
      nav.querySelector(`[data-id="${p.id}"]`).hidden = !Object.keys(cat[p.needs] || {}).length;
    }
  }).catch(() => {});  // (the page itself says what failed)
}
window.addEventListener("hashchange", route);
const typing = (t) => t && (t.isContentEditable || ["INPUT", "TEXTAREA", "SELECT"].includes(t.tagName));
document.addEventListener("keydown", (e) => {
  if (!current) return;
  const dialogOpen = document.getElementById("keydlg").open || keysDlg.open;
  if (e.key === "Enter" && (e.ctrlKey || e.metaKey) && current.submit) { e.preventDefault(); current.submit(); }
  else if (e.key === "Escape" && current.stop && !dialogOpen) { current.stop(); }
  else if (e.altKey && !e.ctrlKey && /^Digit[1-9]$/.test(e.code)) {
    const p = PAGES[Number(e.code.slice(5)) - 1];
    if (p) { e.preventDefault(); location.hash = `#/${p.id}`; }
  } else if (e.altKey && e.code === "KeyN") {
    e.preventDefault();
    if (!current.new) location.hash = "#/chat"; else current.new();
  } else if (!typing(e.target) && !dialogOpen && !e.ctrlKey && !e.metaKey && !e.altKey) {
    if (e.key === "?") { e.preventDefault(); keysDlg.showModal(); }
    else if (e.key === "/" && current.focus) { e.preventDefault(); current.focus(); }
  }
});

async function health() {
  const s = document.getElementById("status");
  try {
    const r = await fetch("/health");
    const b = await r.json();
    s.textContent = b.status;
  } catch { s.textContent = "offline"; }
}
health();
setInterval(health, 5000);
route();

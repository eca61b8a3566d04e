// The console shell: a nav from PAGES, hash routing (#/chat), keyboard shortcuts
// (Ctrl+Enter: the page's submit, Esc: its stop) and a health indicator.
import { PAGES } from "./pages/index.js";
import { el } from "./ui.js";

const nav = document.getElementById("nav"), main = document.getElementById("page");
let current = null;

function route() {
  const id = (location.hash.match(/^#\/([\w-]+)/) || [])[1] || PAGES[0].id;
  const page = PAGES.find((p) => p.id === id) || PAGES[0];
  if (current && current.unmount) current.unmount();
  main.replaceChildren();
  for (const a of nav.children) a.classList.toggle("active", a.dataset.id === page.id);
  document.title = `${page.title} · inferd`;
  current = page.mount(main) || {};
}

for (const p of PAGES) nav.append(el("a", { href: `#/${p.id}`, "data-id": p.id, text: p.title }));
window.addEventListener("hashchange", route);
document.addEventListener("keydown", (e) => {
  if (!current) return;
  if (e.key === "Enter" && (e.ctrlKey || e.metaKey) && current.submit) { e.preventDefault(); current.submit(); }
  else if (e.key === "Escape" && current.stop && !document.getElementById("keydlg").open) { current.stop(); }
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

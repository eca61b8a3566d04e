"""The web console in a real headless Chromium (Debian's `chromium`, driven by Playwright's
Python API) against a real server with the tiny fixtures: pages load without console
errors, a chat streams tokens into the page and Stop ends it on the server too, the
similarity matrix matches the API, the models page shows and changes load state, the API
key is asked for once, and a phone-width screen needs no horizontal scrolling."""

import json
import math
import os
import shutil
from pathlib import Path

import httpx
import pytest

from tests.obs_helpers import metric, models_dir, parse_metrics, wait_for
from tests.server import serve

CHROMIUM = os.environ.get("INFERD_TEST_CHROMIUM", "/usr/bin/chromium")
ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
        "--disable-background-networking", "--disable-component-update", "--disable-sync",
        "--use-fake-device-for-media-stream", "--use-fake-ui-for-media-stream"]  # a beep for the microphone
PAGES = ["chat", "embeddings", "rerank", "chunking", "extract", "rewrite", "read", "transcribe", "speak", "tabular",
         "files", "models", "operator"]


@pytest.fixture(scope="module")
def browser():
    if not os.path.exists(CHROMIUM):
        pytest.fail(f"{CHROMIUM} is missing: apt-get install -y chromium chromium-driver (.ci/run does)")
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        b = p.chromium.launch(executable_path=CHROMIUM, args=ARGS, headless=True)
        yield b
        b.close()


@pytest.fixture(scope="module")
def srv(tmp_path_factory):
    root = tmp_path_factory.mktemp("console")
    d = models_dir(root, embedder=True, reranker=True, iris=True)
    vlm = d / "generators" / "tiny-vlm"  # the tiny llama with the tiny vision projector
    vlm.mkdir(parents=True)
    shutil.copy("tests/fixtures/gguf/tiny-llama.gguf", vlm / "model.gguf")
    shutil.copy("tests/fixtures/gguf/mmproj-tiny.gguf", vlm / "mmproj-tiny.gguf")
    with serve(models_dir=str(d), ml_dir=str(root / "ml"), parallel=2, threads=1) as s:
        yield s


class Page:
    """A fresh browser context (own storage) whose console errors and failed requests are kept."""

    def __init__(self, browser, base: str, **ctx):
        self.ctx = browser.new_context(**ctx)
        self.page = self.ctx.new_page()
        self.page.set_default_timeout(20_000)
        self.base, self.errors = base, []
        self.page.on("console", lambda m: self.errors.append(m.text) if m.type == "error" else None)
        self.page.on("pageerror", lambda e: self.errors.append(f"pageerror: {e}"))
        self.page.on("response", lambda r: self.errors.append(f"HTTP {r.status} {r.url}") if r.status >= 400 else None)

    def go(self, page_id: str):
        self.page.goto(f"{self.base}/#/{page_id}")
        self.page.wait_for_selector("main h1")
        return self.page

    def close(self):
        self.ctx.close()


@pytest.fixture
def web(browser, srv):
    p = Page(browser, srv.url)
    yield p
    p.close()


# Form controls and buttons without an accessible name (a <label for>, a wrapping label,
# aria-label or, for buttons, their text): what a screen reader would announce as nothing.
UNLABELLED = """() => [...document.querySelectorAll('input, select, textarea, button')].filter(n => {
  if (n.type === 'hidden' || n.closest('[hidden], dialog:not([open])')) return false;
  if (n.getAttribute('aria-label') || n.labels && n.labels.length) return false;
  return !(n.tagName === 'BUTTON' && n.textContent.trim());
}).map(n => n.outerHTML.slice(0, 80))"""

# WCAG AA contrast (4.5:1; 3:1 for large text) of every visible element that holds text, its
# colour against the background it is drawn on (translucent layers composited up the tree).
LOW_CONTRAST = """() => {
  const rgba = (c) => { const m = c.match(/[\\d.]+/g).map(Number); return [m[0], m[1], m[2], m.length > 3 ? m[3] : 1]; };
  const over = (top, under) => top.slice(0, 3).map((v, i) => v * top[3] + under[i] * (1 - top[3])).concat(1);
  const bg = (n) => {
    const stack = [];
    for (let e = n; e; e = e.parentElement) {
      const c = rgba(getComputedStyle(e).backgroundColor);
      if (c[3] > 0) stack.push(c);
      if (c[3] >= 1) break;
    }
    return stack.reverse().reduce((acc, c) => over(c, acc), [255, 255, 255, 1]);
  };
  const lum = (c) => { const f = (v) => { v /= 255; return v <= 0.03928 ? v / 12.92 : ((v + 0.055) / 1.055) ** 2.4; };
                       return 0.2126 * f(c[0]) + 0.7152 * f(c[1]) + 0.0722 * f(c[2]); };
  const bad = [];
  for (const n of document.querySelectorAll('body *')) {
    if (![...n.childNodes].some((t) => t.nodeType === 3 && t.textContent.trim())) continue;
    const st = getComputedStyle(n), r = n.getBoundingClientRect();
    if (!r.width || !r.height || st.visibility === 'hidden' || n.closest('[hidden], dialog:not([open]), option, select, :disabled')) continue;
    if (n.closest('input, textarea') || ['OPTION', 'SCRIPT', 'STYLE'].includes(n.tagName)) continue;
    const b = bg(n), fg = over(rgba(st.color), b);
    const [hi, lo] = [lum(fg), lum(b)].sort((x, y) => y - x);
    const ratio = (hi + 0.05) / (lo + 0.05), size = parseFloat(st.fontSize);
    const need = size >= 24 || (size >= 18.66 && Number(st.fontWeight) >= 700) ? 3 : 4.5;
    if (ratio < need) bad.push(`${n.tagName}.${n.className} "${n.textContent.trim().slice(0, 20)}" ${ratio.toFixed(2)}`);
  }
  return bad;
}"""


AXE = Path(__file__).parent / "vendor" / "axe.min.js"  # axe-core (MPL-2.0), tests/vendor/README.md


def axe_serious(page) -> list[str]:
    """axe-core's violations of serious or critical impact on the page as it is now (WCAG 2.x
    A and AA rules, best practices included): rule id, impact and the first offending nodes.
    Injected through the DevTools protocol, which the console's CSP does not govern."""
    if not page.evaluate("typeof window.axe !== 'undefined'"):
        page.evaluate(AXE.read_text())
    found = page.evaluate("""async () => {
      const r = await axe.run(document, { resultTypes: ['violations'] });
      return r.violations.filter((v) => ['serious', 'critical'].includes(v.impact))
        .map((v) => `${v.id} (${v.impact}): ${v.nodes.slice(0, 3).map((n) => n.target.join(' ')).join(', ')}`);
    }""")
    return found


def test_every_page_loads_without_console_errors(web, srv):
    for pid in PAGES:
        page = web.go(pid)
        assert page.inner_text("nav a.active") .lower() == pid.lower()
        page.wait_for_load_state("networkidle")
        assert page.evaluate(UNLABELLED) == [], pid
        for theme in ("light", "dark"):
            page.evaluate(f"document.documentElement.dataset.theme = '{theme}'")
            assert page.evaluate(LOW_CONTRAST) == [], (pid, theme)
            assert axe_serious(page) == [], (pid, theme)
        page.evaluate("delete document.documentElement.dataset.theme")
    # No speaker served here: Speak is out of the nav, and its page says why.
    assert page.is_hidden("nav a[data-id=speak]")
    web.go("speak")
    page.wait_for_selector("#sp-info:has-text('No speaker is served')")
    # The check itself finds a faint text.
    page.evaluate("(() => { const p = document.createElement('p'); p.id = 'faint'; p.textContent = 'faint';"
                  " p.style.color = '#bbbbbb'; document.querySelector('main').append(p); })()")
    assert [b for b in page.evaluate(LOW_CONTRAST) if '"faint"' in b]
    page.evaluate("document.querySelector('#faint').remove()")
    page.keyboard.press("?")
    assert page.is_visible("#keysdlg") and "Alt" in page.inner_text("#keysdlg")
    page.keyboard.press("Escape")
    page.keyboard.press("Alt+1")
    page.wait_for_selector("nav a.active[data-id=chat]")
    page.click("#theme")
    assert page.evaluate("document.documentElement.dataset.theme") == "light"
    page.click("#theme")
    assert page.evaluate("getComputedStyle(document.body).backgroundColor") == "rgb(23, 24, 27)"  # dark
    page.click("#theme")
    assert page.evaluate("document.documentElement.dataset.theme") is None  # auto again
    assert web.errors == []
    r = httpx.get(srv.url + "/", headers={"accept": "text/html"})
    assert r.headers["content-type"].startswith("text/html") and "default-src 'self'" in r.headers["content-security-policy"]
    assert httpx.get(srv.url + "/").text == "inferd is running"  # curl and friends
    assert httpx.get(srv.url + "/ui/js/app.js").headers["content-type"].startswith("text/javascript")
    assert httpx.get(srv.url + "/ui/%2e%2e/__init__.py").status_code == 404


def test_chat_streams_tokens_into_the_page_and_stop_ends_the_generation(web, srv):
    page = web.go("chat")
    page.wait_for_selector("#chat-model option[value=tiny]", state="attached")
    page.fill("#chat-max-tokens", "8")
    page.fill("#chat-extra", '{"ignore_eos": true}')
    page.fill("#chat-input", "hello there")
    page.keyboard.press("Control+Enter")
    stats = page.wait_for_selector(".msg.assistant .stats:has-text('finish')")
    assert "8 tokens" in stats.inner_text() and "finish: length" in stats.inner_text()
    assert "TTFT" in stats.inner_text() and "tok/s" in stats.inner_text()
    assert axe_serious(page) == []  # an answer with its stats and buttons

    before = metric(parse_metrics(httpx.get(srv.url + "/metrics").text), "inferd_generation_tokens_total", model="tiny")
    page.fill("#chat-max-tokens", "4000")
    page.fill("#chat-input", "tell me a long story")
    page.click("#chat-send")
    last = ".msg.assistant >> nth=1"
    page.wait_for_selector(f"{last} >> .content", state="attached")
    n1 = wait_for(lambda: len(page.inner_text(".msg.assistant.streaming .content")) > 5, what="tokens in the page")
    assert n1
    grown = wait_for(lambda: len(page.inner_text(".msg.assistant.streaming .content")) > 40, what="more tokens")
    assert grown and page.is_enabled("#chat-stop") and not page.is_enabled("#chat-send")
    assert httpx.get(srv.url + "/load").json()["models"]["tiny"]["running"] == 1
    page.keyboard.press("Escape")  # the Stop shortcut
    stats = page.wait_for_selector(".msg.assistant:not(.streaming) >> nth=1 >> .stats:has-text('finish')")
    assert "finish: stopped" in stats.inner_text()
    assert page.is_enabled("#chat-send") and not page.is_enabled("#chat-stop")
    # The server cancelled the sequence when the fetch was aborted: far from 4000 tokens.
    wait_for(lambda: httpx.get(srv.url + "/load").json()["models"]["tiny"]["running"] == 0, what="cancelled")
    m = parse_metrics(httpx.get(srv.url + "/metrics").text)
    made = metric(m, "inferd_generation_tokens_total", model="tiny") - before
    assert 5 < made < 3000
    assert metric(m, "inferd_sequences_finished_total", model="tiny", reason="cancelled") == 1
    # The conversation is kept in the browser.
    page.reload()
    page.wait_for_selector(".msg.assistant >> nth=1")
    assert page.locator(".msg").count() == 4
    saved = json.loads(page.evaluate("localStorage.getItem('inferd.chats')"))
    conv = next(c for c in saved["list"] if c["id"] == saved["current"])
    assert [m["role"] for m in conv["messages"]] == ["user", "assistant", "user", "assistant"]
    assert conv["messages"][3]["stats"]["finish"] == "stopped" and conv["title"] == "hello there"
    page.click("#chat-clear")
    assert page.locator(".msg").count() == 0
    assert web.errors == []


def test_json_schema_mode_gives_json_that_follows_the_schema(web):
    page = web.go("chat")
    page.wait_for_selector("#chat-model option[value=tiny]", state="attached")
    page.select_option("#chat-mode", "json_schema")
    schema = {"type": "object", "properties": {"ok": {"type": "boolean"}}, "required": ["ok"],
              "additionalProperties": False}
    page.fill("#chat-schema", json.dumps(schema))
    page.fill("#chat-max-tokens", "40")
    page.fill("#chat-input", "answer in JSON")
    page.click("#chat-send")
    page.wait_for_selector(".msg.assistant .stats:has-text('finish')")
    out = json.loads(page.inner_text(".msg.assistant .content"))
    assert set(out) == {"ok"} and isinstance(out["ok"], bool)
    assert web.errors == []


def cosine(a, b):
    return sum(x * y for x, y in zip(a, b)) / math.sqrt(sum(x * x for x in a) * sum(y * y for y in b))


def test_embeddings_page_shows_the_similarity_matrix(web, srv):
    page = web.go("embeddings")
    page.wait_for_selector("#emb-model option[value=tiny-embed]", state="attached")
    texts = ["the cat sat", "a cat sat down", "stock markets fell"]
    page.fill("#emb-texts", "\n".join(texts))
    page.click("#emb-run")
    page.wait_for_selector("table.heat td")
    cells = page.eval_on_selector_all("table.heat td", "tds => tds.map(td => Number(td.dataset.value))")
    assert len(cells) == 9
    vecs = [d["embedding"] for d in httpx.post(srv.url + "/v1/embeddings",
                                               json={"model": "tiny-embed", "input": texts}).json()["data"]]
    for i in range(3):
        for j in range(3):
            assert abs(cells[i * 3 + j] - cosine(vecs[i], vecs[j])) < 1e-3
    assert all(abs(cells[i * 4] - 1) < 1e-3 for i in range(3))
    assert "3 vectors" in page.inner_text("main")
    assert web.errors == []


def test_models_page_shows_load_state_and_loads_and_unloads(web, srv):
    for name in ("tiny-embed", "tiny"):
        httpx.post(srv.url + "/admin/models/unload", json={"model": name})
    wait_for(lambda: "tiny-embed" not in srv.service.registry.loaded, what="unloaded")
    page = web.go("models")
    row = "#models-rows tr[data-model='tiny-embed']"
    page.wait_for_selector(f"{row}[data-loaded=false]")
    assert page.inner_text(f"{row} .state") == "not loaded"
    assert page.inner_text("#models-rows tr[data-model='fixed'] td:last-child") == "built in"
    page.click(f"{row} button.load")
    page.wait_for_selector(f"{row}[data-loaded=true]")
    assert page.inner_text(f"{row} .state") == "loaded"
    assert "tiny-embed" in srv.service.registry.loaded
    assert page.inner_text(f"{row} .expires").startswith("4m")  # default keep-alive 5m, counting down
    page.wait_for_selector("#load-info:has-text('slots')")
    page.click(f"{row} button.unload")
    page.wait_for_selector(f"{row}[data-loaded=false]")
    assert "tiny-embed" not in srv.service.registry.loaded
    assert page.locator(".charts canvas").count() == 3
    assert web.errors == []


def test_rerank_chunking_and_tabular_pages(web, srv):
    page = web.go("rerank")
    page.wait_for_selector("#rr-model option[value=tiny-rerank]", state="attached")
    page.click("#rr-run")
    page.wait_for_selector(".bars tr")
    shown = page.eval_on_selector_all(".bars tr", "trs => trs.map(t => Number(t.dataset.index))")
    docs = page.input_value("#rr-docs").split("\n")
    api = httpx.post(srv.url + "/v1/rerank", json={"model": "tiny-rerank", "query": page.input_value("#rr-query"),
                                                   "documents": docs}).json()
    assert shown == [r["index"] for r in api["results"]]

    page = web.go("chunking")
    page.wait_for_selector("#ch-model option[value=fixed]", state="attached")
    page.click("#ch-run")
    page.wait_for_selector("#ch-out span.chunk")
    api = httpx.post(srv.url + "/ai/v1/chunk", json={"input": page.input_value("#ch-text"), "config": {
        "model": "fixed", "text": {"target_tokens": 20, "overlap_tokens": 0}}}).json()
    assert page.locator("#ch-out mark").count() == len(api["data"]) > 1
    starts = page.eval_on_selector_all("#ch-out span.chunk", "s => s.map(x => Number(x.dataset.start))")
    assert starts == [c["start_char"] for c in api["data"]]

    page = web.go("tabular")
    page.wait_for_selector("#tab-form input")
    inputs = page.locator("#tab-form input")
    assert inputs.count() == 4
    for i, v in enumerate([5.1, 3.5, 1.4, 0.2]):
        inputs.nth(i).fill(str(v))
    page.click("#tab-run")
    page.wait_for_selector("#tab-out tr[data-output=setosa]")
    assert page.inner_text("#tab-out tr[data-output=setosa] td:last-child") == "1.0000"
    assert web.errors == []


def test_api_key_is_asked_once_and_kept_for_the_session(browser, tmp_path):
    d = models_dir(tmp_path, embedder=True)
    with serve(models_dir=str(d), api_key="s3cret", threads=1) as s:
        web = Page(browser, s.url)
        try:
            page = web.go("chat")
            page.wait_for_selector("#keydlg[open]")
            page.fill("#keyinput", "s3cret")
            page.click("#keyok")
            page.wait_for_selector("#chat-model option[value=tiny]", state="attached")
            assert page.evaluate("sessionStorage.getItem('inferd.apiKey')") == "s3cret"
            page = web.go("embeddings")
            page.click("#emb-run")
            page.wait_for_selector("table.heat td")
            assert not page.is_visible("#keydlg")
            # The one 401 that made the page ask; nothing else failed.
            assert [e for e in web.errors if "401" not in e and "Unauthorized" not in e] == []
        finally:
            web.close()


def test_phone_width_needs_no_horizontal_scrolling(browser, srv):
    web = Page(browser, srv.url, viewport={"width": 390, "height": 844}, is_mobile=True, has_touch=True)
    try:
        for pid in PAGES:
            page = web.go(pid)
            page.wait_for_load_state("networkidle")
            assert page.evaluate("document.documentElement.scrollWidth") <= 391, pid
        assert web.errors == []
    finally:
        web.close()


def test_reasoning_is_shown_apart_and_tool_calls_are_rendered(web):
    from tests.chat_fixtures import THINK_TEMPLATE
    from tests.test_reasoning_http import SPLIT
    from tests.test_tools_http import WEATHER

    page = web.go("chat")
    page.wait_for_selector("#chat-model option[value=tiny]", state="attached")
    page.check("#chat-thinking")
    page.fill("#chat-extra", json.dumps({"chat_template": THINK_TEMPLATE, "grammar": SPLIT, "seed": 1}))
    page.fill("#chat-max-tokens", "60")
    page.fill("#chat-input", "think first")
    page.click("#chat-send")
    msg = page.wait_for_selector(".msg.assistant:not(.streaming):has(.stats:has-text('finish'))")
    reasoning = msg.query_selector("details.reasoning")
    assert reasoning.is_visible() and reasoning.get_attribute("open") is None  # collapsed once done
    msg.query_selector("details.reasoning summary").click()
    thought = msg.query_selector(".rtext").inner_text()
    answer = msg.query_selector(".content").inner_text()
    assert len(thought.split(" ")) == 2 and thought.islower()
    assert answer[0].isupper() and answer.endswith(".") and "think>" not in thought + answer

    page.click("#chat-clear")
    page.uncheck("#chat-thinking")
    page.fill("#chat-tools", json.dumps([WEATHER]))
    page.fill("#chat-extra", json.dumps({"tool_choice": "required", "parallel_tool_calls": False, "seed": 2}))
    page.fill("#chat-max-tokens", "200")
    page.fill("#chat-input", "weather in Paris?")
    page.click("#chat-send")
    page.wait_for_selector(".msg.assistant .stats:has-text('finish: tool_calls')")
    call = page.inner_text(".msg.assistant pre.tool-call")
    assert call.startswith("get_weather(") and call.endswith(")")
    args = json.loads(call[len("get_weather("):-1])
    assert set(args) == {"city", "unit"} and args["unit"] in ("celsius", "fahrenheit")
    assert web.errors == []


def test_an_attached_image_changes_the_answer_of_the_vision_model(web, tmp_path):
    from tests.test_vision_http import png

    page = web.go("chat")
    page.wait_for_selector("#chat-model option[value=tiny-vlm]", state="attached")
    page.select_option("#chat-model", "tiny-vlm")
    assert page.inner_text("#chat-model-info") == "takes text and images"
    page.fill("#chat-max-tokens", "10")
    page.fill("#chat-temperature", "0")
    answers = []
    for seed in (1, 2, None):
        page.click("#chat-clear")
        if seed is not None:
            f = tmp_path / f"img{seed}.png"
            f.write_bytes(png(seed))
            page.set_input_files("#chat-attach", str(f))
            page.wait_for_selector("#chat-attachments img")
        with page.expect_request("**/v1/chat/completions") as req:
            page.fill("#chat-input", "what is in the picture?")
            page.click("#chat-send")
        parts = req.value.post_data_json["messages"][-1]["content"]
        if seed is None:
            assert parts == "what is in the picture?"
        else:
            assert parts[1]["image_url"]["url"].startswith("data:image/png;base64,")
            assert page.locator("#chat-attachments img").count() == 0  # sent, no longer pending
        page.wait_for_selector(".msg.assistant:not(.streaming) .stats:has-text('finish')")
        answers.append(page.inner_text(".msg.assistant .content"))
        if seed is not None:
            assert page.locator(".msg.user img.attached").count() == 1
    assert answers[0] != answers[1] and answers[0] != answers[2] and all(answers)
    assert web.errors == []


MD_CASES = [
    ("# Title\n\nplain *em* and **strong** and ~~gone~~", "<h3>Title</h3><p>plain <em>em</em> and <strong>strong</strong> and <del>gone</del></p>"),
    ("1. a\n2. b\n   - c\n3. d", "<ol><li>a</li><li>b<ul><li>c</li></ul></li><li>d</li></ol>"),
    ("3) x\n4) y", '<ol start="3"><li>x</li><li>y</li></ol>'),
    ("> quoted `code`\n\nafter", "<blockquote><p>quoted <code>code</code></p></blockquote><p>after</p>"),
    ("a * b * c and 2*3", "<p>a * b * c and 2*3</p>"),
    ("snake_case_name stays", "<p>snake_case_name stays</p>"),
    ("[site](https://example.org/a_b) [bad](javascript:alert(1))",
     '<p><a href="https://example.org/a_b" target="_blank" rel="noopener noreferrer">site</a> [bad](javascript:alert(1))</p>'),
    ("<script>alert(1)</script> &amp; <b>x</b>", "<p>&lt;script&gt;alert(1)&lt;/script&gt; &amp;amp; &lt;b&gt;x&lt;/b&gt;</p>"),
    ("`<img src=x onerror=alert(1)>`", "<p><code>&lt;img src=x onerror=alert(1)&gt;</code></p>"),
    ("---", "<hr>"),
    # Math: TeX to MathML (math.js), never markup from the text; dollar amounts stay text.
    (r"area $\pi r^2$", "<p>area <math><mrow><mi>π</mi><msup><mi>r</mi><mn>2</mn></msup></mrow></math></p>"),
    (r"$$\frac{a+1}{\sqrt{b}}$$", '<p><math display="block"><mfrac><mrow><mi>a</mi><mo>+</mo><mn>1</mn></mrow>'
                                   "<msqrt><mi>b</mi></msqrt></mfrac></math></p>"),
    (r"$x_i^2 \le \alpha$", "<p><math><mrow><msubsup><mi>x</mi><mi>i</mi><mn>2</mn></msubsup><mo>≤</mo><mi>α</mi>"
                             "</mrow></math></p>"),
    (r"$\sqrt[3]{x} \text{ if } x \in \mathbb{R}$", "<p><math><mrow><mroot><mi>x</mi><mn>3</mn></mroot><mtext> if "
     '</mtext><mi>x</mi><mo>∈</mo><mi mathvariant="double-struck">R</mi></mrow></math></p>'),
    ("$<b>x</b>$", "<p><math><mrow><mo>&lt;</mo><mi>b</mi><mo>&gt;</mo><mi>x</mi><mo>&lt;</mo><mo>/</mo><mi>b</mi>"
                   "<mo>&gt;</mo></mrow></math></p>"),
    ("costs $5 and $10, $ x $ too", "<p>costs $5 and $10, $ x $ too</p>"),
]


def test_markdown_renderer_cases(web):
    """The renderer module on its own, in the page: each case's HTML, code blocks (also an
    unclosed fence while an answer streams) and nothing made from HTML in the text."""
    page = web.go("chat")
    got = page.evaluate("""async (cases) => {
      const { render } = await import('/ui/js/markdown.js');
      const html = (src) => { const d = document.createElement('div'); d.append(render(src)); return d; };
      const out = cases.map(([src]) => html(src).innerHTML);
      const fence = html('before\\n```js\\nlet a = "<b>";\\n\\nb()\\n```\\nafter');
      const open = html('text\\n```\\nstill streaming <i>');
      const py = html('```python\\ndef f(x):  # add "one"\\n    return x + 1.5\\n```').querySelector('pre code');
      const toks = [...py.querySelectorAll('span')].map((s) => [s.className, s.textContent]);
      return { out, fence: [fence.querySelector('.lang').textContent, fence.querySelector('pre code').textContent,
                            fence.querySelector('pre code').className, fence.querySelectorAll('p').length,
                            fence.querySelectorAll('b').length],
               open: open.querySelector('pre code').textContent, toks, pyText: py.textContent };
    }""", [list(c) for c in MD_CASES])
    assert got["out"] == [want for _, want in MD_CASES]
    assert got["fence"] == ["js", 'let a = "<b>";\n\nb()', "language-js", 2, 0]
    assert got["open"] == "still streaming <i>"
    assert got["toks"] == [["tok-kw", "def"], ["tok-com", '# add "one"'], ["tok-kw", "return"], ["tok-num", "1.5"]]
    assert got["pyText"] == 'def f(x):  # add "one"\n    return x + 1.5'
    assert web.errors == []


def test_operator_page_shows_a_running_generation_and_its_slot(web, srv):
    import threading

    stop, started = threading.Event(), threading.Event()

    def generate():
        with httpx.stream("POST", srv.url + "/v1/completions", timeout=120, json={
                "model": "tiny", "prompt": "once", "max_tokens": 4000, "ignore_eos": True, "stream": True}) as r:
            for _ in r.iter_lines():
                started.set()
                if stop.is_set():
                    break  # closing the connection cancels the sequence

    t = threading.Thread(target=generate, daemon=True)
    t.start()
    try:
        assert started.wait(30)
        page = web.go("operator")
        page.wait_for_selector("#op-models tr[data-model=tiny] td.running:text-is('1')")
        page.wait_for_selector("#op-slots tr[data-model=tiny] .pill.on")
        wait_for(lambda: float(page.inner_text("#op-models tr[data-model=tiny] td.tps")) > 0, timeout=20,
                 what="tokens/s")
        assert page.locator("#op-charts canvas").count() >= 1
    finally:
        stop.set()
        t.join(30)
    wait_for(lambda: httpx.get(srv.url + "/load").json()["models"]["tiny"]["running"] == 0, what="cancelled")
    # Latency percentiles: Prometheus' histogram_quantile over the buckets.
    got = page.evaluate("""async () => {
      const { quantile } = await import('/ui/js/pages/operator.js');
      const s = (le, value, model = 'm') => ({ labels: { model, le }, value });
      const b = [s('0.1', 0), s('0.5', 10), s('1', 20), s('+Inf', 20), s('0.5', 100, 'other'), s('+Inf', 100, 'other')];
      return [quantile(b, 'm', 0.5), quantile(b, 'm', 0.95), quantile(b, 'none', 0.5)];
    }""")
    assert got[0] == pytest.approx(0.5) and got[1] == pytest.approx(0.95) and got[2] is None
    page.wait_for_selector("#op-models tr[data-model=tiny] td.p50:not(:text-is('-'))")
    assert web.errors == []


def test_conversations_over_the_storage_quota_keep_their_text(web):
    """When localStorage is full (simulated: a setItem that holds an image throws the browser's
    QuotaExceededError), the stored copy keeps the text and the page says images are not kept."""
    page = web.go("chat")
    got = page.evaluate("""async () => {
      const { Chats } = await import('/ui/js/chats.js');
      const real = Storage.prototype.setItem;
      Storage.prototype.setItem = function (k, v) {
        if (String(v).includes('data:image')) throw new DOMException('full', 'QuotaExceededError');
        return real.call(this, k, v);
      };
      try {
        const c = new Chats();
        c.create();
        c.setMessages([{ role: 'user', content: [{ type: 'text', text: 'look' },
                                                 { type: 'image_url', image_url: { url: 'data:image/png;base64,AAAA' } }] }]);
        const stored = JSON.parse(localStorage.getItem('inferd.chats'));
        return [c.note, stored.list.find((x) => x.id === c.current.id).messages[0].content,
                c.current.messages[0].content.length];
      } finally { Storage.prototype.setItem = real; }
    }""")
    assert got == ["the browser's storage is full: attached images are not kept after a reload", "look", 2]
    assert web.errors == []


def test_operator_page_lists_active_requests_cancels_one_and_shows_errors(web, srv):
    import threading

    frames: list[dict] = []

    def generate():
        with httpx.stream("POST", srv.url + "/v1/completions", timeout=120, headers={"x-request-id": "console-op"},
                          json={"model": "tiny", "prompt": "once", "max_tokens": 4000, "ignore_eos": True,
                                "stream": True}) as r:
            frames.extend(json.loads(x[6:]) for x in r.iter_lines() if x.startswith("data: {"))

    assert httpx.get(srv.url + "/v1/no-such-route", headers={"x-request-id": "console-404"}).status_code == 404
    t = threading.Thread(target=generate, daemon=True)
    t.start()
    page = web.go("operator")
    row = "#op-active tr[data-id=console-op]"
    page.wait_for_selector(f"{row}[data-state=running]")
    wait_for(lambda: page.inner_text(f"{row} td.tokens").isdigit() and int(page.inner_text(f"{row} td.tokens")) > 0,
             what="tokens so far")
    assert "POST /v1/completions" in page.inner_text(row) and "tiny" in page.inner_text(row)
    assert axe_serious(page) == []  # the tables with rows and their Cancel buttons
    page.click(f"{row} button.cancel")
    t.join(30)
    assert not t.is_alive()
    assert frames[-1]["choices"][0]["finish_reason"] == "cancelled" and len(frames) < 4000
    page.wait_for_selector(row, state="detached")
    assert page.is_visible("#op-no-active")
    err = "#op-errors tr:has-text('console-404')"
    page.wait_for_selector(err)
    assert page.inner_text(f"{err} td.err-status") == "404"
    assert page.inner_text(f"{err} td.message") == "no route GET /v1/no-such-route"
    assert web.errors == []

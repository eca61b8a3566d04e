"""Take the console screenshots in docs/ (docs/console.md shows them): a real server with the
built-in models (smollm2-135m-instruct, all-MiniLM-L6-v2, whisper-tiny.en, pp-ocr,
en_core_web_sm) in headless Chromium.

    .venv/bin/python scripts/console_screenshots.py [--chromium /usr/bin/chromium] [--out docs]
"""

from __future__ import annotations

import argparse
import concurrent.futures
import shutil
import sys
import tempfile
import time
from pathlib import Path

import httpx

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
        "--disable-background-networking", "--disable-component-update", "--disable-sync"]


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--chromium", default="/usr/bin/chromium")
    ap.add_argument("--out", default=str(ROOT / "docs"))
    a = ap.parse_args()
    out = Path(a.out)
    out.mkdir(exist_ok=True)
    from playwright.sync_api import sync_playwright

    from tests.server import serve
    from tests.vision_helpers import INVOICE, encode, render

    tmp = Path(tempfile.mkdtemp())
    invoice = tmp / "invoice.png"
    invoice.write_bytes(encode(render(INVOICE)))

    with serve(builtins=True, models_dir="/nonexistent", parallel=4, threads=1) as s, sync_playwright() as p:
        b = p.chromium.launch(executable_path=a.chromium, args=ARGS, headless=True)
        page = b.new_page(viewport={"width": 1200, "height": 760})
        page.set_default_timeout(120_000)
        page.goto(s.url + "/#/chat")
        page.wait_for_selector("#chat-model option[value='smollm2-135m-instruct']", state="attached")
        page.fill("#chat-system", "You are a concise assistant.")
        page.fill("#chat-max-tokens", "160")
        page.fill("#chat-temperature", "0")
        page.fill("#chat-input", "Write a Python function that adds two numbers.")
        page.keyboard.press("Control+Enter")
        page.wait_for_selector(".msg.assistant .stats:has-text('finish')")
        page.screenshot(path=str(out / "console-chat.png"))

        page.goto(s.url + "/#/read")
        page.wait_for_selector("#rd-model option", state="attached")
        page.set_input_files("#rd-file", str(invoice))
        page.wait_for_selector("#rd-image")  # wait_for_function would eval, which the console's CSP forbids
        while not page.evaluate("document.querySelector('#rd-image').naturalWidth"):
            time.sleep(0.05)
        page.click("#rd-run")
        page.wait_for_selector("#rd-stage rect.box")
        page.screenshot(path=str(out / "console-read.png"))

        page.goto(s.url + "/#/transcribe")
        page.wait_for_selector("#tr-model option", state="attached")
        page.set_input_files("#tr-file", str(ROOT / "tests" / "fixtures" / "speech" / "clips" / "walk.wav"))
        page.click("#tr-run")
        page.wait_for_selector("#tr-segments tr")
        page.screenshot(path=str(out / "console-transcribe.png"))

        page.goto(s.url + "/#/extract")
        page.wait_for_selector("#ex-model option[value='en_core_web_sm']", state="attached")
        page.click("#ex-run")
        page.wait_for_selector("#ex-out mark.entity")
        page.screenshot(path=str(out / "console-extract.png"))

        page.goto(s.url + "/#/embeddings")
        page.wait_for_selector("#emb-model option", state="attached")
        page.click("#emb-run")
        page.wait_for_selector("table.heat td")
        page.screenshot(path=str(out / "console-embeddings.png"))

        # Some traffic for the live charts: four streams at once.
        def stream(i: int) -> None:
            httpx.post(s.url + "/v1/completions", timeout=300, json={
                "model": "smollm2-135m-instruct", "prompt": f"Story number {i}:", "max_tokens": 160, "ignore_eos": True})

        httpx.post(s.url + "/v1/chat/completions", json={"model": "no-such-model", "messages": []})  # a recent error
        with concurrent.futures.ThreadPoolExecutor(6) as pool:  # six requests on four slots: two wait
            jobs = [pool.submit(stream, i) for i in range(6)]
            page.goto(s.url + "/#/operator")
            page.wait_for_selector("#op-slots tr")
            page.wait_for_selector("#op-active tr")
            time.sleep(5)  # the charts fill while they run
            page.screenshot(path=str(out / "console-operator.png"), full_page=True)  # down to the requests and errors
            page.goto(s.url + "/#/models")
            page.wait_for_selector("#models-rows tr")
            time.sleep(4)
            page.screenshot(path=str(out / "console-models.png"))
            for j in jobs:
                j.result()

        if httpx.get(s.url + "/ai/v1/models").json().get("speakers"):  # once text to speech is served
            page.goto(s.url + "/#/speak")
            page.wait_for_selector("#sp-model option", state="attached")
            page.click("#sp-run")
            page.wait_for_selector("#sp-download:not([hidden])")
            page.screenshot(path=str(out / "console-speak.png"))

        page.set_viewport_size({"width": 390, "height": 760})  # same storage: the chat is still there
        page.goto(s.url + "/#/chat")
        page.wait_for_selector(".msg.assistant", state="attached")
        page.evaluate("document.querySelector('#chat-messages').scrollIntoView()")
        page.screenshot(path=str(out / "console-phone.png"))
        b.close()
    shutil.rmtree(tmp)
    print("wrote", *sorted(x.name for x in out.glob("console-*.png")))


if __name__ == "__main__":
    main()

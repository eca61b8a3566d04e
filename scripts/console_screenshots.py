"""Take the console screenshots in docs/ (README shows them): a real server with the
built-in models (gemma-3-270m, all-MiniLM-L6-v2, iris-classifier) in headless Chromium.

    .venv/bin/python scripts/console_screenshots.py [--chromium /usr/bin/chromium] [--out docs]
"""

from __future__ import annotations

import argparse
import concurrent.futures
import sys
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

    with serve(builtins=True, models_dir="/nonexistent", parallel=4, threads=1) as s, sync_playwright() as p:
        b = p.chromium.launch(executable_path=a.chromium, args=ARGS, headless=True)
        page = b.new_page(viewport={"width": 1200, "height": 760})
        page.set_default_timeout(120_000)
        page.goto(s.url + "/#/chat")
        page.wait_for_selector("#chat-model option[value='gemma-3-270m']", state="attached")
        page.fill("#chat-system", "You are a concise assistant.")
        page.fill("#chat-max-tokens", "60")
        page.fill("#chat-input", "Name three rivers in Europe.")
        page.keyboard.press("Control+Enter")
        page.wait_for_selector(".msg.assistant .stats:has-text('finish')")
        page.screenshot(path=str(out / "console-chat.png"))

        page.goto(s.url + "/#/embeddings")
        page.wait_for_selector("#emb-model option", state="attached")
        page.click("#emb-run")
        page.wait_for_selector("table.heat td")
        page.screenshot(path=str(out / "console-embeddings.png"))

        # Some traffic for the live charts: four streams at once.
        def stream(i: int) -> None:
            httpx.post(s.url + "/v1/completions", timeout=300, json={
                "model": "gemma-3-270m", "prompt": f"Story number {i}:", "max_tokens": 64, "ignore_eos": True})

        page.goto(s.url + "/#/models")
        page.wait_for_selector("#models-rows tr")
        with concurrent.futures.ThreadPoolExecutor(6) as pool:  # six requests on four slots: two wait
            jobs = [pool.submit(stream, i) for i in range(6)]
            time.sleep(6)  # the charts fill while they run
            page.screenshot(path=str(out / "console-models.png"))
            for j in jobs:
                j.result()

        page.set_viewport_size({"width": 390, "height": 760})  # same storage: the chat is still there
        page.goto(s.url + "/#/chat")
        page.wait_for_selector(".msg.assistant", state="attached")
        page.evaluate("document.querySelector('#chat-messages').scrollIntoView()")
        page.screenshot(path=str(out / "console-phone.png"))
        b.close()
    print("wrote", *sorted(x.name for x in out.glob("console-*.png")))


if __name__ == "__main__":
    main()

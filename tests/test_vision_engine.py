"""Images in the continuous-batching engine, on the tiny llama + its tiny random mmproj fixture
(scripts/make_tiny_mmproj.py): an image changes greedy output deterministically, two images
differ, a follow-up turn reuses the cached image without encoding it again, and image streams
share the engine with text-only streams."""

from __future__ import annotations

import threading
from pathlib import Path

import numpy as np
import pytest

from inferd.models import ModelKind
from inferd.registry.discovery import make_spec
from inferd.runtimes.options import RuntimeOptions
from inferd.scheduling.generation import Job
from inferd.service.loading import LOADERS
from inferd.types import Image, SamplingParams

GGUF = Path(__file__).parent / "fixtures" / "gguf"


def image(seed: int, size: int = 40) -> Image:
    rgb = np.random.default_rng(seed).integers(0, 256, (size, size, 3), dtype=np.uint8)
    return Image(rgb.tobytes(), size, size)


@pytest.fixture(scope="module")
def vlm(tmp_path_factory):
    folder = tmp_path_factory.mktemp("gen") / "tiny-vlm"
    folder.mkdir()
    (folder / "model.gguf").symlink_to((GGUF / "tiny-llama.gguf").resolve())
    (folder / "mmproj-tiny.gguf").symlink_to((GGUF / "mmproj-tiny.gguf").resolve())
    spec = make_spec("tiny-vlm", folder, "test", ModelKind.GENERATOR)
    assert "vision" in spec.capabilities and spec.manifest["mmproj"] == "mmproj-tiny.gguf"
    h = LOADERS[(ModelKind.GENERATOR, "gguf")](spec, RuntimeOptions(threads=1, parallel=4))
    calls = {"media": 0}
    real = h.runtime.decode_media

    def counting(*a, **kw):
        calls["media"] += 1
        return real(*a, **kw)

    h.runtime.decode_media = counting
    h.calls = calls
    yield h
    h.close()


class Run:
    def __init__(self, h, text: str, images: list[Image], max_tokens: int = 12):
        if images:
            ids, media = h.runtime.tokenize_multimodal(text, images)
        else:
            ids, media = h.runtime.tokenize(text, True, True), {}
        self.deltas, self.done = [], threading.Event()
        self.job = Job(prompt=ids, sampler=h.runtime.make_sampler(SamplingParams(temperature=0.0, ignore_eos=True)),
                       max_tokens=max_tokens, sink=self._sink, media=media)
        h.scheduler.submit(self.job)

    def _sink(self, d):
        self.deltas.append(d)
        if d.finish_reason or d.error:
            self.done.set()

    def wait(self):
        assert self.done.wait(30), "generation did not finish"
        assert self.deltas[-1].error is None, self.deltas[-1].error
        return self

    @property
    def tokens(self):
        return [t for d in self.deltas for t in d.tokens]

    @property
    def usage(self):
        return self.deltas[-1].usage


def prompt(h, question="what is in the picture?"):
    return f"<|im_start|>user\n{h.runtime.media_marker}\n{question}<|im_end|>\n<|im_start|>assistant\n"


def fresh(h):
    h.scheduler.call_when_idle(lambda: None).result(10)


def test_an_image_reaches_the_model_deterministically(vlm):
    fresh(vlm)
    a1 = Run(vlm, prompt(vlm), [image(1)]).wait().tokens
    fresh(vlm)
    a2 = Run(vlm, prompt(vlm), [image(1)]).wait().tokens
    fresh(vlm)
    b = Run(vlm, prompt(vlm), [image(2)]).wait().tokens
    assert a1 == a2  # the same image and text: the same greedy tokens
    assert a1 != b   # another image: another answer


def test_the_prompt_carries_a_placeholder_span_per_image(vlm):
    ids, media = vlm.runtime.tokenize_multimodal(prompt(vlm) + vlm.runtime.media_marker, [image(1), image(2)])
    try:
        assert len(media) == 2
        for start, chunk in media.items():
            span = ids[start:start + chunk.n_tokens]
            assert chunk.n_tokens == 16 and all(t < 0 for t in span)
        assert all(t >= 0 for i, t in enumerate(ids) if not any(s <= i < s + c.n_tokens for s, c in media.items()))
        same, other = (ids[s:s + c.n_tokens] for s, c in sorted(media.items()))
        assert same != other  # two images, two distinct spans
    finally:
        for c in media.values():
            c.close()


def test_a_follow_up_turn_reuses_the_cached_image(vlm):
    fresh(vlm)
    first = Run(vlm, prompt(vlm), [image(3)], max_tokens=4).wait()
    encodes = vlm.calls["media"]
    follow = prompt(vlm) + "ok<|im_end|>\n<|im_start|>user\nand?<|im_end|>\n"
    second = Run(vlm, follow, [image(3)], max_tokens=4).wait()
    assert vlm.calls["media"] == encodes  # the image was not encoded again
    head = len(vlm.runtime.tokenize_multimodal(prompt(vlm), [image(3)])[0])
    assert second.usage.cached_prompt_tokens >= head - 1  # its span (and the text before it) came from the cache
    assert first.usage.cached_prompt_tokens == 0


def test_image_streams_share_the_engine_with_text_streams(vlm):
    fresh(vlm)
    text_only = [Run(vlm, f"hello world {i}", [], max_tokens=40) for i in range(2)]
    imgs = [Run(vlm, prompt(vlm, f"question {i}"), [image(10 + i)], max_tokens=8) for i in range(8)]
    for r in imgs + text_only:
        r.wait()
    assert all(len(r.tokens) == 8 for r in imgs) and all(len(r.tokens) == 40 for r in text_only)
    alone = []
    for i in range(2):
        fresh(vlm)
        alone.append(Run(vlm, prompt(vlm, f"question {i}"), [image(10 + i)], max_tokens=8).wait().tokens)
    assert [r.tokens for r in imgs[:2]] == alone  # batching did not change what each image stream got

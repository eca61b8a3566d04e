"""Florence-2's task prompts and the parsing of what it generates, as transformers'
Florence2Processor does it: a task token (`<OCR>`, `<OD>`, ...) becomes its natural-language
prompt; the generated text's `<loc_N>` tokens (N in 0..999, bins over the image's width and
height) become pixel boxes (x1, y1, x2, y2) or quad boxes (four corners) of the source image.

Pure functions over strings; no model, no numpy."""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from inferd.errors import InvalidInput

# task token -> post-processing kind (Florence2Processor.tasks_answer_post_processing_type)
TASKS = {
    "<OCR>": "pure_text", "<OCR_WITH_REGION>": "ocr", "<CAPTION>": "pure_text",
    "<DETAILED_CAPTION>": "pure_text", "<MORE_DETAILED_CAPTION>": "pure_text",
    "<OD>": "description_with_bboxes", "<DENSE_REGION_CAPTION>": "description_with_bboxes",
    "<CAPTION_TO_PHRASE_GROUNDING>": "phrase_grounding", "<REFERRING_EXPRESSION_SEGMENTATION>": "polygons",
    "<REGION_TO_SEGMENTATION>": "polygons", "<OPEN_VOCABULARY_DETECTION>": "description_with_bboxes_or_polygons",
    "<REGION_TO_CATEGORY>": "pure_text", "<REGION_TO_DESCRIPTION>": "pure_text", "<REGION_TO_OCR>": "pure_text",
    "<REGION_PROPOSAL>": "bboxes",
}
WITHOUT_INPUT = {
    "<OCR>": "What is the text in the image?",
    "<OCR_WITH_REGION>": "What is the text in the image, with regions?",
    "<CAPTION>": "What does the image describe?",
    "<DETAILED_CAPTION>": "Describe in detail what is shown in the image.",
    "<MORE_DETAILED_CAPTION>": "Describe with a paragraph what is shown in the image.",
    "<OD>": "Locate the objects with category name in the image.",
    "<DENSE_REGION_CAPTION>": "Locate the objects in the image, with their descriptions.",
    "<REGION_PROPOSAL>": "Locate the region proposals in the image.",
}
WITH_INPUT = {
    "<CAPTION_TO_PHRASE_GROUNDING>": "Locate the phrases in the caption: {input}",
    "<REFERRING_EXPRESSION_SEGMENTATION>": "Locate {input} in the image with mask",
    "<REGION_TO_SEGMENTATION>": "What is the polygon mask of region {input}",
    "<OPEN_VOCABULARY_DETECTION>": "Locate {input} in the image.",
    "<REGION_TO_CATEGORY>": "What is the region {input}?",
    "<REGION_TO_DESCRIPTION>": "What does the region {input} describe?",
    "<REGION_TO_OCR>": "What text is in the region {input}?",
}
DEFAULT_TASK = "<OCR>"  # a reader with no prompt reads the text
_TASK_TOKEN = re.compile(r"^\s*(<[A-Z][A-Z_]*>)")
_LOC = re.compile(r"<loc_(\d+)>")
_BOX = re.compile(r"<loc_(\d+)><loc_(\d+)><loc_(\d+)><loc_(\d+)>")
_QUAD = re.compile(r"(.+?)" + r"<loc_(\d+)>" * 8)
_PHRASE = re.compile(r"([^<]+(?:<loc_\d+>){4,})")
_ANY_BOXES = re.compile(r"(?:(?:<loc_\d+>){4,})")
_PHRASE_TEXT = re.compile(r"^\s*(.*?)(?=<od>|</od>|<box>|</box>|<bbox>|</bbox>|<loc_)")
BINS = 1000


@dataclass
class Task:
    token: str          # "<OCR>", or "" for a free-form prompt (kept as written, as the processor does)
    kind: str           # post-processing kind (TASKS)
    prompt: str         # the text the encoder reads


@dataclass
class Parsed:
    text: str
    regions: list[dict] = field(default_factory=list)  # {"text", "bbox": [x1,y1,x2,y2], "quad"?: [8], "label"?}
    has_regions: bool = False


def task_of(prompt: str | None) -> Task:
    """The request's prompt -> the task (400 for a task token Florence-2 does not have, or a
    no-input task token with more text beside it, as the processor refuses)."""
    p = (prompt or DEFAULT_TASK).strip()
    m = _TASK_TOKEN.match(p)
    if m is None:
        return Task("", "pure_text", p)
    tok = m.group(1)
    if tok not in TASKS:
        raise InvalidInput(f"unsupported Florence-2 task {tok}; tasks: {', '.join(TASKS)}", "prompt")
    if tok in WITHOUT_INPUT:
        if p != tok:
            raise InvalidInput(f"task {tok} takes no input: it must be the whole prompt", "prompt")
        return Task(tok, TASKS[tok], WITHOUT_INPUT[tok])
    rest = p[len(tok):].strip()
    if not rest:
        raise InvalidInput(f"task {tok} needs an input after the token (e.g. '{tok} a red car')", "prompt")
    return Task(tok, TASKS[tok], WITH_INPUT[tok].format(input=rest))


def _clean(text: str) -> str:
    return text.replace("<s>", "").replace("</s>", "").replace("<pad>", "")


def dequantize(bins: list[int], size: tuple[int, int]) -> list[int]:
    """(x, y, x, y, ...) bins -> pixels: the bin's centre, truncated to int as the processor's
    `.int()` does (values are positive, so truncation is floor)."""
    w, h = size
    return [int((b + 0.5) * (w if i % 2 == 0 else h) / BINS) for i, b in enumerate(bins)]


def _phrase(s: str) -> str | None:
    m = _PHRASE_TEXT.search(s)
    return m.group().strip() if m else None


def _boxes(text: str, size: tuple[int, int], allow_empty: bool) -> list[dict]:
    out = []
    for phrase_text in (_ANY_BOXES if allow_empty else _PHRASE).findall(text):
        phrase_text = phrase_text.replace("<ground>", "", 1).replace("<obj>", "", 1)
        if not phrase_text and not allow_empty:
            continue
        name = _phrase(phrase_text)
        if name is None:
            continue
        name = name.encode("ascii", "ignore").decode("ascii")
        for m in _BOX.finditer(phrase_text):
            out.append({"text": name, "label": name, "bbox": dequantize([int(g) for g in m.groups()], size)})
    return out


def _ocr(text: str, size: tuple[int, int]) -> list[dict]:
    out = []
    for content, *q in _QUAD.findall(text):
        quad = dequantize([int(v) for v in q], size)
        xs, ys = quad[0::2], quad[1::2]
        out.append({"text": content.strip(), "quad": quad, "bbox": [min(xs), min(ys), max(xs), max(ys)]})
    return out


def _polygons(text: str, size: tuple[int, int]) -> list[dict]:
    """Segmentation answers: each polygon's bounding box (the read response carries boxes),
    the polygon itself as `quad`-style flat points."""
    out = []
    for chunk in re.findall(r"(?:[^<]*)((?:<loc_\d+>|<sep>|<poly>|</poly>){4,})", text):
        for part in re.split(r"<sep>|<poly>|</poly>", chunk):
            bins = [int(v) for v in _LOC.findall(part)]
            if len(bins) < 4:
                continue
            pts = dequantize(bins[:len(bins) // 2 * 2], size)
            xs, ys = pts[0::2], pts[1::2]
            out.append({"text": "", "polygon": pts, "bbox": [min(xs), min(ys), max(xs), max(ys)]})
    return out


def parse(task: Task, raw: str, size: tuple[int, int]) -> Parsed:
    """The decoded generation (special tokens kept) -> text and regions, for an image of
    `size` (width, height) source pixels."""
    text = _clean(raw)
    kind = task.kind
    if kind == "pure_text":  # as the processor answers: <loc_N> a text task generated stays in the text
        return Parsed(text.strip())
    if kind == "ocr":
        regions = _ocr(text, size)
    elif kind in ("description_with_bboxes", "phrase_grounding"):
        regions = _boxes(text, size, allow_empty=False)
    elif kind == "bboxes":
        regions = _boxes(text, size, allow_empty=True)
    elif kind == "description_with_bboxes_or_polygons" and "<poly>" not in text:
        regions = _boxes(text, size, allow_empty=False)
    else:
        regions = _polygons(text, size)
    plain = "\n".join(r["text"] for r in regions if r["text"]) if regions else _LOC.sub("", text).strip()
    return Parsed(plain, regions, True)

"""Vendor the OpenAI API response schemas inferd's OpenAI face is checked against.

    git clone https://github.com/openai/openai-openapi && \\
        python scripts/vendor_openai_schemas.py openai-openapi/openapi.json COMMIT

Writes tests/openai_schemas/openai-openapi.subset.json: the named response schemas of the
official OpenAPI document (MIT licence) and every schema they reference, unchanged, plus
where they came from (`info.version` and the commit)."""

from __future__ import annotations

import json
import sys
from pathlib import Path

ROOTS = ["CreateChatCompletionResponse", "CreateChatCompletionStreamResponse", "CreateCompletionResponse",
         "CreateEmbeddingResponse", "ListModelsResponse", "Model", "ErrorResponse",
         # the Responses API (/v1/responses): the object, every stream event, input_items, input_tokens
         "Response", "ResponseStreamEvent", "ResponseItemList", "TokenCountsResource"]
OUT = Path(__file__).resolve().parent.parent / "tests" / "openai_schemas" / "openai-openapi.subset.json"


def refs(node, found: set[str]) -> None:
    if isinstance(node, dict):
        r = node.get("$ref")
        if isinstance(r, str) and r.startswith("#/components/schemas/"):
            found.add(r.rsplit("/", 1)[1])
        for v in node.values():
            refs(v, found)
    elif isinstance(node, list):
        for v in node:
            refs(v, found)


def main() -> None:
    doc = json.loads(Path(sys.argv[1]).read_text())
    schemas = doc["components"]["schemas"]
    keep, todo = set(), list(ROOTS)
    while todo:
        name = todo.pop()
        if name in keep:
            continue
        keep.add(name)
        found: set[str] = set()
        refs(schemas[name], found)
        todo += sorted(found - keep)
    out = {"source": "https://github.com/openai/openai-openapi openapi.json", "commit": sys.argv[2],
           "openapi_version": doc["info"]["version"], "roots": ROOTS,
           "components": {"schemas": {k: schemas[k] for k in sorted(keep)}}}
    OUT.write_text(json.dumps(out, indent=1, ensure_ascii=False) + "\n")
    print(f"{len(keep)} schemas -> {OUT}")


if __name__ == "__main__":
    main()

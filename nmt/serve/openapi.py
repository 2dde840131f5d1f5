"""The OpenAPI document as version 3.0: Swagger UI 4 (the newest that swagger-ui-bundle ships) reads 3.0 only, and
client generators that check the version reject 3.1's JSON Schema keywords in a document that says 3.0.3. FastAPI
and pydantic 2 write 3.1 only, and no kept library converts it, so this does, for what they write here: an `anyOf`
with `{"type": "null"}` (an Optional field) becomes `nullable` (an `allOf` around a `$ref`, whose siblings 3.0
ignores), and a schema's `examples` list its `example` (which
Swagger UI's "Try it out" then fills in), each example made a request this very server takes (`fit_examples`)."""
from __future__ import annotations

from typing import Any

NULL = {"type": "null"}


def openapi_30(doc: dict) -> dict:
    """`doc` (FastAPI's document) changed in place into OpenAPI 3.0.3; returned."""
    doc["openapi"] = "3.0.3"
    _convert(doc)
    return doc


def _convert(node: Any) -> None:
    if isinstance(node, list):
        for item in node:
            _convert(item)
        return
    if not isinstance(node, dict):
        return
    options = node.get("anyOf")
    if isinstance(options, list) and NULL in options:
        rest = [o for o in node.pop("anyOf") if o != NULL]
        if len(rest) == 1:
            node.update({k: v for k, v in rest[0].items() if k not in node})
        else:
            node["anyOf"] = rest
        node["nullable"] = True
    if "$ref" in node and len(node) > 1:   # 3.0 ignores a $ref's siblings (nullable, description): an allOf keeps them
        node["allOf"] = [{"$ref": node.pop("$ref")}]
    if isinstance(node.get("examples"), list) and node["examples"]:   # a Schema's (a Media Type's is a map)
        node["example"] = node.pop("examples")[0]
    for value in node.values():
        _convert(value)


HELLO = {"ko": "안녕하세요", "en": "Hello."}


def fit_examples(doc: dict, pairs: list, beam: int) -> dict:
    """`doc`'s request examples as this server takes them: text in its first model's source language, its beam
    size (`beam`: the server takes it), and with several models (`pairs`: (source, target) languages, the first
    first) the languages, without which a request is refused."""
    src, tgt = pairs[0]
    for path in ("/translate", "/attention"):
        schema = doc["paths"][path]["post"]["requestBody"]["content"]["application/json"]["schema"]
        example = schema["example"]
        text = HELLO.get(src, example["text"])
        schema["example"] = {**example, "text": [text] if isinstance(example["text"], list) else text,
                             **({"beam_size": beam} if "beam_size" in example else {}),
                             **({"src_lang": src, "tgt_lang": tgt} if len(pairs) > 1 else {})}
    return doc

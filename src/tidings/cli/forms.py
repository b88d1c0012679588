"""A question's form on a terminal: what its requested schema asks for, as words, and a
person's answer typed as ``name=value`` pairs or as a JSON object.

A requested schema is a flat JSON object schema (string, number, integer, boolean, an enum, an
array of an enum). A typed value is read by its field's type (``seats=2`` is the number 2),
and checked by nobody here: the service checks the answer against the schema and says where
it does not fit (its 422 is shown as it is). A value that cannot be read as its type is sent
as the text it is, so that the service's words say what is wrong with it.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from typing import Any

TRUE = ("true", "yes", "y", "1", "on")
FALSE = ("false", "no", "n", "0", "off")


class FormError(ValueError):
    """A typed answer that is not a form's answer at all (not ``name=value``, not a JSON
    object, a field the form does not have): nothing is sent."""


def properties(schema: Mapping[str, Any]) -> dict[str, Mapping[str, Any]]:
    found = schema.get("properties")
    if not isinstance(found, Mapping):
        return {}
    return {str(k): v for k, v in found.items() if isinstance(v, Mapping)}


def _choices(field: Mapping[str, Any]) -> list[Any] | None:
    if isinstance(field.get("enum"), list):
        return list(field["enum"])
    options = field.get("oneOf") or field.get("anyOf")
    if isinstance(options, list) and all(isinstance(o, Mapping) and "const" in o
                                         for o in options):
        return [o["const"] for o in options]
    return None


def field_words(name: str, field: Mapping[str, Any], required: bool) -> str:
    """One field as a person reads it: ``seats (integer ≥ 1, required)``."""
    kind = str(field.get("type", "string"))
    choices = _choices(field)
    items = field.get("items")
    if kind == "array" and isinstance(items, Mapping) and _choices(items) is not None:
        what = "any of " + "|".join(str(c) for c in _choices(items) or ())
    elif choices is not None:
        what = "one of " + "|".join(str(c) for c in choices)
    else:
        what = kind
    bounds = [f"≥ {field['minimum']}" if "minimum" in field else "",
              f"≤ {field['maximum']}" if "maximum" in field else "",
              f"format {field['format']}" if "format" in field else ""]
    what = " ".join([what, *(b for b in bounds if b)])
    extra = ", required" if required else ""
    default = f", default {json.dumps(field['default'])}" if "default" in field else ""
    title = f" -- {field['description']}" if isinstance(field.get("description"), str) else ""
    return f"{name} ({what}{extra}{default}){title}"


def form_words(schema: Mapping[str, Any]) -> list[str]:
    """Each field of the form, in the schema's order."""
    required = set(schema.get("required") or ())
    return [field_words(name, field, name in required)
            for name, field in properties(schema).items()]


def _typed(field: Mapping[str, Any], text: str) -> Any:
    kind = field.get("type")
    if kind == "integer":
        try:
            return int(text)
        except ValueError:
            return text
    if kind == "number":
        try:
            number = float(text)
        except ValueError:
            return text
        return int(number) if number.is_integer() and "." not in text else number
    if kind == "boolean":
        if text.lower() in TRUE:
            return True
        if text.lower() in FALSE:
            return False
        return text
    if kind == "array":
        items = field.get("items")
        item: Mapping[str, Any] = items if isinstance(items, Mapping) else {}
        return [_typed(item, part.strip()) for part in text.split(",") if part.strip()]
    return text


def parse_fields(schema: Mapping[str, Any], pairs: Iterable[str]) -> dict[str, Any]:
    """``name=value`` pairs as the form's content, each value read by its field's type."""
    fields = properties(schema)
    content: dict[str, Any] = {}
    for pair in pairs:
        name, equals, text = pair.partition("=")
        name = name.strip()
        if not equals or not name:
            raise FormError(f"{pair!r} is not NAME=VALUE")
        if name not in fields:
            known = ", ".join(fields) or "none"
            raise FormError(f"the form has no field {name!r} (its fields: {known})")
        content[name] = _typed(fields[name], text.strip())
    return content


def parse_json(text: str) -> dict[str, Any]:
    """A JSON object typed whole: the content as it is."""
    try:
        content = json.loads(text)
    except ValueError as exc:
        raise FormError(f"not JSON: {exc}") from None
    if not isinstance(content, dict):
        raise FormError("the answer must be a JSON object")
    return content


def parse_answer(schema: Mapping[str, Any], text: str) -> dict[str, Any]:
    """What a person typed after ``/answer``: a JSON object, ``name=value`` pairs separated by
    spaces, or -- for a form of one field -- the value alone."""
    text = text.strip()
    if text.startswith("{"):
        return parse_json(text)
    fields = properties(schema)
    if len(fields) == 1 and "=" not in text.split(" ", 1)[0]:
        (name,) = fields
        return parse_fields(schema, [f"{name}={text}"]) if text else {}
    import shlex

    try:
        pairs = shlex.split(text)
    except ValueError as exc:
        raise FormError(str(exc)) from None
    return parse_fields(schema, pairs)


__all__ = ("FormError", "field_words", "form_words", "parse_answer", "parse_fields",
           "parse_json", "properties")

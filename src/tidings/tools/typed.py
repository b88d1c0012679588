"""Tools from typed functions: ``@tidings.tool`` builds a :class:`Tool` from a function.

The tool's name is the function's, its description the docstring, and its JSON schema comes
from the signature through pydantic: type hints, defaults, ``Annotated[T, "description"]`` or
``Field(description=...)``, pydantic models, ``Optional``, lists, dicts, ``Literal`` and enums.
A parameter annotated :class:`ToolContext` receives the call's context (ids, and a way to
start a background task) and is not part of the schema.

The model's arguments are validated before the function runs; invalid ones -- a missing or
mistyped field, or one the function does not take -- come back to the model as one error
result naming every field at fault, and the function is not called. Sync functions run in a
worker thread, so a slow one never holds up the event loop (other conversations' turns).
"""

from __future__ import annotations

import asyncio
import functools
import inspect
import json
import types
import typing
from collections.abc import Callable, Mapping
from typing import Any, overload

import pydantic
import pydantic_core
from pydantic.fields import FieldInfo

from tidings.tools.registry import TOOL_NAME, Tool, ToolContext, ToolOutput
from tidings.types import ToolContext as CallIds

INVALID_ARGUMENTS = "invalid_arguments"
"""The ``error`` of the result a call with invalid arguments gets (and its message's meta)."""


def invalid_arguments(error: pydantic.ValidationError) -> ToolOutput:
    """The model's view of arguments that did not validate: each field at fault, by path."""
    fields = [
        {"loc": list(e["loc"]), "msg": e["msg"], "type": e["type"]}
        for e in error.errors(include_url=False, include_input=False, include_context=False)
    ]
    names = ", ".join(".".join(str(p) for p in f["loc"]) or "(arguments)" for f in fields)
    body = {"error": INVALID_ARGUMENTS,
            "message": f"the arguments were not valid ({names}); the tool did not run",
            "fields": fields}
    return ToolOutput(json.dumps(body), is_error=True, meta={"error": INVALID_ARGUMENTS})


def as_output(result: object) -> str | ToolOutput:
    """A function's return value as the model reads it: text as is, ``None`` as an empty
    result, anything else (pydantic models, dicts, lists, numbers) as JSON."""
    if isinstance(result, str | ToolOutput):
        return result
    if result is None:
        return ""
    return pydantic_core.to_json(result).decode()


def _is_context(annotation: object) -> bool:
    """``ToolContext``, also as ``Annotated[ToolContext, ...]`` or ``ToolContext | None``."""
    if typing.get_origin(annotation) is typing.Annotated:
        annotation = typing.get_args(annotation)[0]
    if typing.get_origin(annotation) in (typing.Union, types.UnionType):
        return any(_is_context(a) for a in typing.get_args(annotation))
    return isinstance(annotation, type) and issubclass(annotation, CallIds)


def _field(annotation: Any, default: Any) -> tuple[Any, Any]:
    """The pydantic field of one parameter; a plain string in ``Annotated`` is its
    description (pydantic itself ignores such metadata)."""
    if typing.get_origin(annotation) is typing.Annotated:
        base, *extras = typing.get_args(annotation)
        texts = [x for x in extras if isinstance(x, str)]
        if texts:
            rest = [x for x in extras if not isinstance(x, str)]
            annotation = typing.Annotated[(base, *rest)] if rest else base
            described = pydantic.Field(description=" ".join(texts))
            if isinstance(default, FieldInfo):
                return annotation, FieldInfo.merge_field_infos(described, default)
            if default is not ...:
                described = pydantic.Field(default, description=" ".join(texts))
            return annotation, described
    return annotation, default


class _Signature:
    """What a function's signature says: its arguments model and where the context goes."""

    def __init__(self, fn: Callable[..., Any]) -> None:
        try:
            hints = typing.get_type_hints(fn, include_extras=True)
        except NameError as exc:
            raise TypeError(
                f"tool {fn.__qualname__}: a type hint cannot be resolved ({exc}); define the "
                "types it names at module level") from exc
        self.context: str | None = None
        self.arguments: list[tuple[str, str]] = []
        """(field, parameter) of each argument the model gives."""
        fields: dict[str, Any] = {}
        for name, param in inspect.signature(fn).parameters.items():
            annotation = hints.get(name, Any)
            if param.kind in (param.VAR_POSITIONAL, param.VAR_KEYWORD, param.POSITIONAL_ONLY):
                raise TypeError(f"tool {fn.__qualname__}: parameter {name!r} must be one a "
                                "keyword can name (no *args, **kwargs or positional-only)")
            if _is_context(annotation):
                self.context = name
                continue
            default = ... if param.default is inspect.Parameter.empty else param.default
            annotation, default = _field(annotation, default)
            key = name
            if hasattr(pydantic.BaseModel, name):
                # A name pydantic's models use (``schema``, ``json``...): the field is kept
                # under another name, and the model still sees (and errors name) its own.
                key = f"{name}_arg"
                alias = pydantic.Field(alias=name)
                default = (FieldInfo.merge_field_infos(default, alias=name)
                           if isinstance(default, FieldInfo)
                           else alias if default is ... else pydantic.Field(default, alias=name))
            fields[key] = (annotation, default)
            self.arguments.append((key, name))
        self.model: type[pydantic.BaseModel] = pydantic.create_model(
            f"{fn.__name__}_arguments",
            __config__=pydantic.ConfigDict(extra="forbid", protected_namespaces=()),
            **fields,
        )

    def schema(self) -> dict[str, Any]:
        schema = self.model.model_json_schema()
        schema.pop("title", None)
        for prop in schema.get("properties", {}).values():
            prop.pop("title", None)
        return schema


def _from_function(
    fn: Callable[..., Any], *, name: str | None, description: str | None, read_only: bool,
    needs_approval: bool,
) -> Tool:
    tool_name = name or fn.__name__
    if TOOL_NAME.fullmatch(tool_name) is None:
        raise ValueError(f"tool name {tool_name!r} is not a valid identifier")
    signature = _Signature(fn)
    model, names, context_name = signature.model, signature.arguments, signature.context
    is_async = inspect.iscoroutinefunction(fn)

    async def handler(context: ToolContext, arguments: Mapping[str, Any]) -> str | ToolOutput:
        try:
            validated = model.model_validate(arguments)
        except pydantic.ValidationError as exc:
            return invalid_arguments(exc)
        kwargs = {param: getattr(validated, key) for key, param in names}
        if context_name is not None:
            kwargs[context_name] = context
        if is_async:
            result = await fn(**kwargs)
        else:
            # A worker thread: a slow sync tool never holds up the other turns on this loop.
            result = await asyncio.to_thread(functools.partial(fn, **kwargs))
        return as_output(result)

    handler.__qualname__ = f"tool:{tool_name}"
    return Tool(
        name=tool_name,
        description=description if description is not None else inspect.getdoc(fn) or "",
        handler=handler,
        parameters=signature.schema(),
        read_only=read_only,
        needs_approval=needs_approval,
    )


@overload
def tool(fn: Callable[..., Any], /) -> Tool: ...


@overload
def tool(
    *, name: str | None = None, description: str | None = None, read_only: bool = False,
    needs_approval: bool = False,
) -> Callable[[Callable[..., Any]], Tool]: ...


def tool(
    fn: Callable[..., Any] | None = None, /, *, name: str | None = None,
    description: str | None = None, read_only: bool = False, needs_approval: bool = False,
) -> Tool | Callable[[Callable[..., Any]], Tool]:
    """Make a typed function (sync or async) a :class:`Tool`: ``@tidings.tool`` or
    ``@tidings.tool(name=..., description=..., read_only=True, needs_approval=True)``.

    ``read_only`` tools are the ones automatic turns may use; a ``needs_approval`` tool's every
    call waits for a person's decision. Arguments the function does not take are refused
    (named in the error), as are missing and mistyped ones; values are converted where that
    loses nothing (``"3"`` for an ``int``), as pydantic's lax mode does.
    """

    def decorate(function: Callable[..., Any]) -> Tool:
        return _from_function(function, name=name, description=description,
                              read_only=read_only, needs_approval=needs_approval)

    return decorate if fn is None else decorate(fn)


__all__ = ("INVALID_ARGUMENTS", "as_output", "invalid_arguments", "tool")

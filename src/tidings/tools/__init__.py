"""Tools a model may call: the registry, and (later) the built-in tools."""

from __future__ import annotations

from tidings.tools.registry import Tool, ToolContext, ToolOutput, ToolRegistry
from tidings.tools.typed import tool

__all__ = ("Tool", "ToolContext", "ToolOutput", "ToolRegistry", "tool")

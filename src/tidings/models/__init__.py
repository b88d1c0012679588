"""Model clients: the protocol, the scripted model, and adapters for hosted providers."""

from __future__ import annotations

from tidings.models.base import (
    DeltaCallback,
    Model,
    ModelError,
    ModelErrorKind,
    ModelReply,
    ModelRequest,
    PromptMessage,
    ToolCall,
    ToolSpec,
)

__all__ = (
    "DeltaCallback",
    "Model",
    "ModelError",
    "ModelErrorKind",
    "ModelReply",
    "ModelRequest",
    "PromptMessage",
    "ToolCall",
    "ToolSpec",
)

"""One line for each thing that waits on a person, or reports along the way: a tool call held
for approval and how it was decided, a question an MCP server asks and how it was answered, an
MCP call's progress -- and the commands that decide or answer them from a shell.

The chat (:mod:`tidings.cli.render`), ``tidings watch`` (:mod:`tidings.cli.client`),
``tidings approvals`` and ``tidings questions`` say them in the same words.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from tidings.cli.forms import form_words, properties
from tidings.cli.text import short


def progress_words(d: Mapping[str, Any]) -> str:
    """An MCP call's progress as one line: ``desk.book: 3/10 -- message``."""

    def number(value: Any) -> str:
        return f"{round(value, 2):g}" if isinstance(value, int | float) else str(value)

    done = number(d.get("progress", "?"))
    if d.get("total") is not None:
        done += "/" + number(d["total"])
    message = d.get("message")
    return f"{d.get('tool', '?')}: {done}" + (f" — {message}" if message else "")


def answer_command(conversation_id: str, question: Mapping[str, Any]) -> str:
    """The command that answers a question, its fields left for the person to fill."""
    schema = question.get("requested_schema")
    fields = properties(schema) if isinstance(schema, Mapping) else {}
    accept = " ".join(f"--field {name}=…" for name in fields) or "--accept '{}'"
    return (f"tidings answer {conversation_id} {question.get('question_id', '?')} {accept} "
            "(or --decline, --cancel)")


def call_words(approval: Mapping[str, Any]) -> str:
    """A held tool call as one line: its tool and its arguments."""
    return f"{approval.get('tool_name', '?')} {short(approval.get('arguments', {}))}"


def decision_words(approval: Mapping[str, Any]) -> str:
    """How an approval stands: ``approved by alice``, ``denied by bob``, ``expired``."""
    status = str(approval.get("status", "?"))
    return status + (f" by {approval['decided_by']}" if approval.get("decided_by") else "")


def approval_command(conversation_id: str, approval_id: str) -> str:
    """The commands that decide a held call from a shell."""
    return (f"tidings approve {conversation_id} {approval_id} (or tidings deny "
            f"{conversation_id} {approval_id})")


def question_words(q: Mapping[str, Any]) -> tuple[str, list[str]]:
    """A question as text: its first line (who asks what) and its form's fields."""
    kind = q.get("kind", "elicitation")
    what = "asks" if kind == "elicitation" else "asks to use the model"
    head = f"{q.get('asker', '?')} {what}: {q.get('message', '')}"
    schema = q.get("requested_schema")
    return head, form_words(schema) if isinstance(schema, Mapping) else []


def answer_words(q: Mapping[str, Any]) -> str:
    """How a question stands, after its first line: ``accepted by alice: {"seats": 2}``."""
    status = str(q.get("status", "?"))
    line = status + (f" by {q['decided_by']}" if q.get("decided_by") else "")
    if q.get("answer") is not None:
        line += ": " + short(q["answer"])
    return line


__all__ = ("answer_command", "answer_words", "approval_command", "call_words", "decision_words",
           "progress_words", "question_words")

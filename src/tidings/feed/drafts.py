"""Answers in progress: the text a model has streamed for one step of a run, before it commits.

A draft lives in memory only, in the process whose turn calls the model (:class:`Draft`), and
in the hubs of other processes that watch the conversation (:class:`RemoteDrafts`, rebuilt
from the deltas they hear). It is a hint for live views: the committed message is the truth.
Its life is short and one-way: text is appended; then the model's reply is complete
(:meth:`Draft.seal` -- from then on it is not offered to new watchers, since its commit may
already be visible) and commits, or it is discarded (the call failed, timed out, the turn
stopped or lost its slot), which watchers are told.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Protocol

from tidings.records.transcript import MESSAGE_COMMITTED
from tidings.types import ConversationId, FeedEvent, RunId, RunStatus

MESSAGE_DELTA = "message_delta"
MESSAGE_DISCARDED = "message_discarded"

DraftKey = tuple[str, int]
"""A draft's run and step."""


def delta_event(conversation_id: str, key: DraftKey, offset: int, text: str,
                at_us: int) -> FeedEvent:
    """A live ``message_delta``: ``text`` at character ``offset`` of the step's answer."""
    run_id, step = key
    return FeedEvent(ConversationId(conversation_id), None, MESSAGE_DELTA, RunId(run_id),
                     {"run_id": run_id, "step": step, "offset": offset, "text": text}, at_us)


def discarded_event(conversation_id: str, key: DraftKey, reason: str, at_us: int) -> FeedEvent:
    """A live ``message_discarded``: the step's text will never be committed."""
    run_id, step = key
    return FeedEvent(ConversationId(conversation_id), None, MESSAGE_DISCARDED, RunId(run_id),
                     {"run_id": run_id, "step": step, "reason": reason}, at_us)


def committed_step(event: FeedEvent) -> DraftKey | None:
    """The step whose answer a journal event commits (an assistant ``message_committed``)."""
    if event.type != MESSAGE_COMMITTED:
        return None
    message = event.data.get("message") or {}
    step = message.get("step")
    if message.get("role") != "assistant" or not isinstance(step, int):
        return None
    return str(message.get("run_id")), step


def ended_run(event: FeedEvent) -> str | None:
    """The run a journal event ends (a ``turn_status`` to a final status): none of its
    drafts will commit any more."""
    if event.type != "turn_status" or event.run_id is None:
        return None
    try:
        ended = RunStatus(str(event.data.get("status"))).ended
    except ValueError:
        return None
    return event.run_id if ended else None


class DraftSink(Protocol):
    """Where a draft's changes go (the hub)."""

    def drafted(self, draft: Draft, offset: int, piece: str) -> None: ...

    def sealed(self, draft: Draft) -> None: ...

    def discarded(self, draft: Draft, reason: str) -> None: ...


class Draft:
    """The answer one model call is streaming, for one step of one run.

    :meth:`append` is the model's ``on_delta``; :meth:`seal` says the reply is complete;
    :meth:`discard` says it will never commit (also after a seal, when the commit failed).
    Each is a no-op once the draft is discarded.
    """

    def __init__(self, sink: DraftSink, conversation_id: str, run_id: str, step: int) -> None:
        self._sink = sink
        self.conversation_id = conversation_id
        self.key: DraftKey = (run_id, step)
        self._pieces: list[str] = []
        self.length = 0
        self.sealed = False
        self.discarded = False

    @property
    def text(self) -> str:
        if len(self._pieces) > 1:
            self._pieces = ["".join(self._pieces)]
        return self._pieces[0] if self._pieces else ""

    def append(self, piece: str) -> None:
        if not piece or self.sealed or self.discarded:
            return
        offset = self.length
        self._pieces.append(piece)
        self.length += len(piece)
        self._sink.drafted(self, offset, piece)

    def seal(self) -> None:
        if self.sealed or self.discarded:
            return
        self.sealed = True
        self._sink.sealed(self)

    def discard(self, reason: str) -> None:
        if self.discarded:
            return
        self.discarded = True
        self._sink.discarded(self, reason)


@dataclass(slots=True)
class _Remote:
    text: str = ""


@dataclass(slots=True)
class Merged:
    """What one remote delta changed: the new text to pass on (at ``offset``), and whether
    the beginning of the draft is missing here (ask its writer for a snapshot)."""

    offset: int = 0
    text: str = ""
    missing: bool = False


@dataclass
class RemoteDrafts:
    """The drafts of one conversation written in other processes, as heard from them."""

    drafts: dict[DraftKey, _Remote] = field(default_factory=dict)

    def merge(self, key: DraftKey, offset: int, text: str, final: bool) -> Merged:
        """Take a delta; pieces that overlap what is known add only what is new. A final
        delta ends the draft here (its commit follows in the journal)."""
        draft = self.drafts.get(key)
        known = 0 if draft is None else len(draft.text)
        if offset > known:
            return Merged(missing=True)  # pieces before it were not heard
        merged = Merged(known, text[known - offset:])
        if final:
            self.drafts.pop(key, None)
        elif merged.text:
            if draft is None:
                draft = self.drafts[key] = _Remote()
            draft.text += merged.text
        return merged

    def drop(self, key: DraftKey) -> bool:
        """Forget a draft; whether it was known."""
        return self.drafts.pop(key, None) is not None

    def drop_run(self, run_id: str) -> list[DraftKey]:
        """Forget every draft of a run that ended; their keys."""
        keys = [k for k in self.drafts if k[0] == run_id]
        for key in keys:
            del self.drafts[key]
        return keys

    def snapshot(self) -> list[tuple[DraftKey, str]]:
        return [(key, d.text) for key, d in self.drafts.items() if d.text]


__all__ = (
    "MESSAGE_DELTA", "MESSAGE_DISCARDED", "Draft", "DraftKey", "DraftSink", "Merged",
    "RemoteDrafts", "committed_step", "delta_event", "discarded_event", "ended_run",
)

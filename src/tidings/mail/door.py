"""The single door (M1-M3): every input -- a person's words, a peer agent's send, the kernel's
own mail -- enters one inputs table through here.

Callers (the Python API, HTTP, the command line) use :meth:`Door.post`, which applies the
admission checks and refuses the kernel's two origins (``task_result``, ``child``) before
anything is written. The kernel writes its mail with :meth:`Door.deliver` inside its own unit
of work, and the door never judges the kernel's mail for admission (M1).

The kernel's mail is a background task's notification (``task_result``, written by the task
journal) or a child conversation's reply (``child``, written by the relay): both come through
:meth:`Door.deliver`, so each is a row of the inputs with its stamps, announced by
``input_accepted`` and read by a run like any other input (H1).

Read order (M2) is the kernel's rows first, then arrival; ``queue_position`` stays the arrival
number. Delivery modes (M3): ``queue`` waits for the next turn; ``steer`` joins the running turn
at its next safe point (after the current step's tool results commit). Kernel mail is always
``queue``.

Both ways in end in :func:`add_input`, the one writer of the inputs table; what becomes of a
queued input afterwards (read, taken by a turn, cancelled) is :mod:`tidings.mail.queue`.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from tidings.clock import Clock
from tidings.errors import (
    ConversationClosedError,
    InputQueueFullError,
    InvalidInputError,
    OriginNotAllowedError,
    UnknownConversationError,
    UnknownInputError,
)
from tidings.records.rows import input_from_row
from tidings.records.transcript import INPUT_ACCEPTED, ConversationTx
from tidings.store import Store, Tx
from tidings.support.policy import check_id, check_text, encode_json
from tidings.types import (
    Author,
    AuthorKind,
    ConversationId,
    ConversationStatus,
    DeliveryMode,
    Input,
    InputId,
    InputState,
    Origin,
    RunId,
    new_id,
)

RESERVED_META_KEYS = frozenset(
    {"kind", "authored_by", "sender_conversation_id", "sender_conversation_public_id",
     "task_key", "run_public_id", "origin", "callback_sources", "input_id", "retry",
     "child_request", "relayed_request", "environment", "worker_final", "callback_result"}
)
"""Meta keys only the kernel writes: a caller cannot dress an input up as a notification."""


@dataclass(frozen=True, slots=True)
class DoorConfig:
    """Admission bounds for callers' inputs."""

    content_limit_bytes: int = 64 * 1024
    meta_limit_bytes: int = 4 * 1024
    queue_limit: int = 1_000


@dataclass(frozen=True, slots=True)
class Admission:
    """A caller's input that passed every check a database is not needed for."""

    conversation_id: str
    content: str
    origin: Origin
    author: Author
    mode: DeliveryMode
    sender_conversation_id: str | None
    run_public_id: str | None
    task_key: str | None
    meta: dict[str, Any]
    idempotency_key: str | None
    owner: str | None


def kernel_author(cx: ConversationTx) -> Author:
    """Whom the kernel's mail in this conversation is authored by: its owner principal, the
    creator of the work the mail reports on -- the kernel impersonates nobody else, and the
    mail's origin says that the kernel wrote it (M6, M8)."""
    owner = cx.conversation.owner
    return Author(AuthorKind.HUMAN, owner, owner)


def add_input(
    cx: ConversationTx,
    *,
    content: str,
    origin: Origin,
    authored_by: Author,
    delivery_mode: DeliveryMode,
    sender_conversation_id: str | None = None,
    run_public_id: str | None = None,
    task_key: str | None = None,
    meta: dict[str, Any] | None = None,
    idempotency_key: str | None = None,
) -> Input:
    """Write one input at the next arrival number and journal ``input_accepted``: the one
    writer of the inputs table, called by :meth:`Door.admit` and :meth:`Door.deliver` after
    their checks. Arrival numbers are gap-free because the unit holds the conversation."""
    position = int(cx.row["last_queue_position"]) + 1
    cx.row["last_queue_position"] = position
    cx.row["queued_inputs"] = int(cx.row["queued_inputs"]) + 1
    accepted = Input(
        input_id=InputId(new_id("in")),
        conversation_id=cx.conversation_id,
        queue_position=position,
        origin=origin,
        authored_by=authored_by,
        sender_conversation_id=(
            None if sender_conversation_id is None
            else ConversationId(sender_conversation_id)
        ),
        run_public_id=None if run_public_id is None else RunId(run_public_id),
        task_key=task_key,
        delivery_mode=delivery_mode,
        content=content,
        meta=dict(meta or {}),
        state=InputState.QUEUED,
        run_id=None,
        accepted_at_us=cx.now_us,
    )
    cx.tx.run_later(
        "insert_input",
        input_id=accepted.input_id,
        conversation_id=cx.conversation_id,
        queue_position=position,
        origin=origin.value,
        kernel=int(origin.is_kernel),
        author_kind=authored_by.kind.value,
        author_handle=authored_by.handle,
        author_display_name=authored_by.display_name,
        sender_conversation_id=sender_conversation_id,
        run_public_id=run_public_id,
        task_key=task_key,
        delivery_mode=delivery_mode.value,
        content=content,
        meta=(json.dumps(accepted.meta, ensure_ascii=False, separators=(",", ":"))
              if accepted.meta else "{}"),
        idempotency_key=idempotency_key,
        now_us=cx.now_us,
    )
    cx.accepted.append(accepted)
    cx.written_inputs[accepted.input_id] = content
    cx.record_event(INPUT_ACCEPTED, input_accepted_data(accepted))
    return accepted


def input_accepted_data(item: Input) -> dict[str, Any]:
    """The ``input_accepted`` event: origin, authored_by and the stamps (M15)."""
    data: dict[str, Any] = {
        "input_id": item.input_id,
        "origin": item.origin.value,
        "authored_by": {
            "kind": item.authored_by.kind.value,
            "handle": item.authored_by.handle,
            "display_name": item.authored_by.display_name,
        },
        "queue_position": item.queue_position,
        "delivery_mode": item.delivery_mode.value,
    }
    if item.sender_conversation_id is not None:
        data["sender_conversation_public_id"] = item.sender_conversation_id
    if item.run_public_id is not None:
        data["run_public_id"] = item.run_public_id
    if item.task_key is not None:
        data["task_key"] = item.task_key
    return data


class Door:
    """Posting and listing a conversation's inputs."""

    def __init__(self, store: Store, clock: Clock, config: DoorConfig | None = None) -> None:
        self.store = store
        self.clock = clock
        self.config = config or DoorConfig()

    async def post(self, conversation_id: str, content: str, **fields: Any) -> Input:
        """Admit a caller's input, or refuse it with a typed error and write nothing.

        Takes the arguments of :meth:`prepare`. A repeated ``idempotency_key`` returns the
        first input. A person's input lifts the suppression a stop left and the wait for a
        person after model retries ran out (C6, C8).
        """
        admission = self.prepare(conversation_id, content, **fields)

        def unit(tx: Tx) -> Input:
            cx = ConversationTx.lock(tx, conversation_id, self.clock)
            accepted = self.admit(cx, admission)
            cx.save()
            return accepted

        return await self.store.transact(unit, route=conversation_id)

    def prepare(
        self,
        conversation_id: str,
        content: str,
        *,
        origin: Origin | str = Origin.PERSON,
        authored_by: Author | None = None,
        delivery_mode: DeliveryMode | str = DeliveryMode.QUEUE,
        sender_conversation_id: str | None = None,
        run_public_id: str | None = None,
        task_key: str | None = None,
        meta: Mapping[str, Any] | None = None,
        idempotency_key: str | None = None,
        owner: str | None = None,
        kernel_meta: Mapping[str, Any] | None = None,
    ) -> Admission:
        """Check a caller's input before any transaction: every refusal that needs no
        database is made here, with a typed error.

        ``kernel_meta`` is the runtime's own marking of an input it admits on someone's behalf
        (a retry, a child request): it may use the reserved keys a caller's ``meta`` may not.
        """
        check_id(conversation_id, "conversation id")
        try:
            origin = Origin(origin)
        except ValueError:
            raise InvalidInputError(f"unknown origin {origin!r}") from None
        if origin.is_kernel:
            raise OriginNotAllowedError(origin.value)
        try:
            mode = DeliveryMode(delivery_mode)
        except ValueError:
            raise InvalidInputError(f"unknown delivery mode {delivery_mode!r}") from None
        check_text(content, "content", limit_bytes=self.config.content_limit_bytes)
        if not content.strip():
            raise InvalidInputError("content must not be empty")
        expected_kind = AuthorKind.HUMAN if origin is Origin.PERSON else AuthorKind.AGENT
        author = authored_by or Author(expected_kind, owner or origin.value, owner or "")
        try:
            author_kind = AuthorKind(author.kind)
        except ValueError:
            raise InvalidInputError(f"unknown author kind {author.kind!r}") from None
        author = Author(author_kind, author.handle, author.display_name)
        if author.kind is not expected_kind:
            raise InvalidInputError(
                f"an input of origin {origin.value!r} is authored by a {expected_kind.value}"
            )
        check_id(author.handle, "author handle")
        check_text(author.display_name, "author display name", limit_bytes=200)
        if origin is Origin.PERSON and (run_public_id or task_key or sender_conversation_id):
            raise InvalidInputError(
                "run_public_id, task_key and sender stamps ride only agent sends and kernel mail"
            )
        for value, what in (
            (sender_conversation_id, "sender conversation id"),
            (run_public_id, "run_public_id"),
            (task_key, "task_key"),
            (idempotency_key, "idempotency key"),
        ):
            if value is not None:
                check_id(value, what)
        if meta is not None and not isinstance(meta, Mapping):
            raise InvalidInputError("meta must be a JSON object")
        extra = dict(meta or {})
        if not all(isinstance(key, str) for key in extra):
            raise InvalidInputError("meta keys must be strings")
        if extra or self.config.meta_limit_bytes < 2:  # "{}" is plain JSON, 2 bytes
            encode_json(extra, "meta", limit_bytes=self.config.meta_limit_bytes)
        reserved = RESERVED_META_KEYS & set(extra)
        if reserved:
            raise InvalidInputError(f"meta keys {sorted(reserved)} are the kernel's own")
        extra.update(kernel_meta or {})
        return Admission(
            conversation_id=conversation_id, content=content, origin=origin, author=author,
            mode=mode, sender_conversation_id=sender_conversation_id,
            run_public_id=run_public_id, task_key=task_key, meta=extra,
            idempotency_key=idempotency_key, owner=owner,
        )

    def admit(self, cx: ConversationTx, a: Admission) -> Input:
        """Write a prepared input in the caller's unit, after the checks that need the
        conversation (status, owner, idempotency key, queue bound)."""
        c = cx.conversation
        if c.status is ConversationStatus.TOMBSTONED or (
            a.owner is not None and c.owner != a.owner
        ):
            raise UnknownConversationError(a.conversation_id)
        if a.idempotency_key is not None:
            row = cx.tx.one(
                "input_by_key", conversation_id=a.conversation_id, key=a.idempotency_key
            )
            if row is not None:
                return input_from_row(row)
        if c.status is ConversationStatus.ARCHIVED:
            raise ConversationClosedError(a.conversation_id, c.status.value)
        limit = self.config.queue_limit
        if cx.queued_count >= limit:
            raise InputQueueFullError(a.conversation_id, limit)
        accepted = add_input(
            cx,
            content=a.content,
            origin=a.origin,
            authored_by=a.author,
            delivery_mode=a.mode,
            sender_conversation_id=a.sender_conversation_id,
            run_public_id=a.run_public_id,
            task_key=a.task_key,
            meta=a.meta,
            idempotency_key=a.idempotency_key,
        )
        if a.origin is Origin.PERSON and (c.suppressed or c.awaiting_person):
            cx.update(suppressed=False, awaiting_person=False)
            cx.record_event("continuation_resumed", {"input_id": accepted.input_id})
        return accepted

    def room(self, cx: ConversationTx) -> int:
        """How many more inputs the conversation's queue takes now."""
        return max(0, self.config.queue_limit - cx.queued_count)

    def deliver(
        self,
        cx: ConversationTx,
        content: str,
        *,
        origin: Origin,
        authored_by: Author,
        sender_conversation_id: str | None,
        run_public_id: str | None,
        task_key: str | None,
        meta: Mapping[str, Any] | None = None,
    ) -> Input:
        """Write the kernel's own mail in the caller's unit: no admission checks, always queued.

        Archived conversations admit it too; only a tombstoned one owes nothing. The queue's
        bound holds for it as for anyone: a full queue refuses it, and the kernel's sweep
        offers it again later (M13, M16).
        """
        if not origin.is_kernel:
            raise InvalidInputError("deliver writes only the kernel's origins")
        if cx.conversation.status is ConversationStatus.TOMBSTONED:
            raise UnknownConversationError(cx.conversation_id)
        if self.room(cx) <= 0:
            raise InputQueueFullError(cx.conversation_id, self.config.queue_limit)
        return add_input(
            cx,
            content=content,
            origin=origin,
            authored_by=authored_by,
            delivery_mode=DeliveryMode.QUEUE,
            sender_conversation_id=sender_conversation_id,
            run_public_id=run_public_id,
            task_key=task_key,
            meta=dict(meta or {}),
        )

    async def input(self, input_id: str, *, owner: str | None = None) -> Input:
        """One input by its id; an unknown one, or one in a conversation ``owner`` cannot
        see, is :class:`UnknownInputError` alike."""
        check_id(input_id, "input id")

        def unit(tx: Tx) -> Input:
            row = tx.one("get_input", input_id=input_id)
            conversation = None if row is None else tx.one(
                "get_conversation", conversation_id=row["conversation_id"])
            if row is None or conversation is None or conversation["status"] == "tombstoned" or (
                owner is not None and conversation["owner"] != owner
            ):
                raise UnknownInputError(input_id)
            return input_from_row(row)

        return await self.store.read(unit)

    async def inputs(
        self, conversation_id: str, *, owner: str | None = None, limit: int = 1_000
    ) -> list[Input]:
        """Queued inputs in read order (kernel first, then arrival), then the read ones."""
        check_id(conversation_id, "conversation id")

        def unit(tx: Tx) -> list[Input]:
            row = tx.one("get_conversation", conversation_id=conversation_id)
            if row is None or row["status"] == "tombstoned" or (
                owner is not None and row["owner"] != owner
            ):
                raise UnknownConversationError(conversation_id)
            return [
                input_from_row(r)
                for r in tx.all("list_inputs", conversation_id=conversation_id, limit=limit)
            ]

        return await self.store.read(unit)

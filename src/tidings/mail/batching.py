"""Receipt batching (M8) and combined worker reports (M9). Pure.

At a turn boundary, up to 16 already-arrived, contiguous, compatible receipts (kernel mail:
``task_result`` and ``child`` inputs) share one supplementary reply. The earlier receipts become
individual message turns and the last one opens the reply whose history includes them; every
receipt keeps its own content and stamps.

Two receipts are *compatible* when they have identical principals, the same frozen environment
(model intent and ordered fallbacks, tools, approval mode -- M5), both are plain visible input
(ordinary visible assembled input, no custom context, no freshness fence), both have a known
result provenance, and they come from the same source run -- except that two independent worker
finals may cross source runs when their frozen original requester and execution memory context
also match and both carry ``callback_result``, the exact worker result pointer.

There is no delay to gather a batch and no reordering across an incompatible receipt: a batch
is always a prefix of what has arrived, in read order. Whether a batch commits is the runner's
decision (only with uncut history that opens a reply); otherwise :meth:`BatchPlan.head_alone`
processes the original head individually and the rest stay queued.

Nothing here touches the store or the clock: the store applies these functions inside its
transaction, after locking every source in :attr:`BatchPlan.lock_order`.
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

from tidings.types import Author, AuthorKind, ConversationId, Input, InputId, Origin, RunId

MAX_BATCH_RECEIPTS = 16
"""M8: at most this many receipts share one supplementary reply."""

SNAPSHOT_LIMIT_BYTES = 64 * 1024
"""The snapshot size limit that bounds a batch's total content (M8), in UTF-8 bytes.

It is the size of one input snapshot the door admits (``DoorConfig.content_limit_bytes``) and of
one claimed signal batch (``OutboxConfig.claim_max_bytes``, S5): a batch of receipts never hands
a turn more content at once than a single input could."""


@dataclass(frozen=True, slots=True)
class Principals:
    """Who a receipt is for and by whom it is authored.

    ``owner`` is the answering conversation's owner principal; ``answerer`` is the answerer of
    the run that started the task or opened the child turn (``answering_user_public_id``; M6:
    never the conversation's default, never everyone); ``authored_by`` is the originating run's
    creator -- the kernel relays its own receipt and impersonates nobody.

    Principals are identified by :attr:`identity`: an author's display name is a label, not
    part of who the author is.
    """

    owner: str
    answerer: str
    authored_by: Author

    @property
    def identity(self) -> tuple[str, str, AuthorKind, str]:
        """What "identical principals" compares: owner, answerer, author kind and handle."""
        return (self.owner, self.answerer, self.authored_by.kind, self.authored_by.handle)


@dataclass(frozen=True, slots=True)
class FrozenEnvironment:
    """The environment a receipt's turn runs in, frozen when the receipt was written (M5).

    ``model`` and ``fallbacks`` are the mailing run's model intent and ordered fallback list
    (order matters). ``tools`` is the explicit set the source's tools intersected with the
    answering profile's tools at the time, stored sorted and de-duplicated: an empty tuple means
    *no tools* and is never read as "any", so a later profile change cannot widen it.
    ``approval_mode`` is the stricter of the run's and the profile's mode then.
    Equal environments (``==``) are the same environment for batching.
    """

    model: str
    fallbacks: tuple[str, ...]
    tools: tuple[str, ...]
    approval_mode: str

    def __post_init__(self) -> None:
        tools: object = self.tools
        if tools is None or isinstance(tools, str):
            raise TypeError(
                "a receipt's tools are an explicit collection of names (an empty one included); "
                "there is no 'any'"
            )
        object.__setattr__(self, "tools", tuple(sorted(set(self.tools))))
        object.__setattr__(self, "fallbacks", tuple(self.fallbacks))


@dataclass(frozen=True, slots=True)
class WorkerFinal:
    """What makes a receipt an independent worker final, frozen with it.

    ``requester`` is the frozen original requester of the worker's work, ``memory_context`` the
    execution memory context it ran under, and ``callback_result`` the exact worker result
    pointer. A worker final without ``callback_result`` has unknown result provenance and never
    batches.
    """

    requester: str
    memory_context: str
    callback_result: str | None


@dataclass(frozen=True, slots=True)
class Receipt:
    """One arrived kernel-mail input, as the batching rule sees it.

    Invariants: ``origin`` is one of the kernel's (``task_result`` or ``child``);
    ``queue_position`` is the arrival number (M1, M2); ``content_bytes`` is the size of the
    input's content in UTF-8 bytes and is not negative.

    The stamps are ``sender_conversation_id`` (the conversation whose run produced the result;
    ``sender_conversation_public_id`` on the wire), ``run_public_id`` (the *source run*: the run
    that started the task, or that made the spawn or send opening the child turn) and
    ``task_key`` (the key the model saw). A receipt missing any stamp has unknown result
    provenance and never batches.

    ``visible``, ``custom_context`` and ``freshness_fence`` describe how the input is
    assembled; only ordinary visible assembled input without custom context or a freshness
    fence is :attr:`plain` and may batch. ``worker_final`` is set when the receipt is an
    independent worker final.
    """

    input_id: InputId
    queue_position: int
    origin: Origin
    principals: Principals
    environment: FrozenEnvironment
    sender_conversation_id: ConversationId | None
    run_public_id: RunId | None
    task_key: str | None
    content_bytes: int
    visible: bool = True
    custom_context: bool = False
    freshness_fence: bool = False
    worker_final: WorkerFinal | None = None

    def __post_init__(self) -> None:
        if not Origin(self.origin).is_kernel:
            raise ValueError(f"a receipt is kernel mail; origin {self.origin!r} is a caller's")
        if self.content_bytes < 0:
            raise ValueError("content_bytes must not be negative")

    @property
    def plain(self) -> bool:
        """Ordinary visible assembled input: no custom context, no freshness fence."""
        return self.visible and not self.custom_context and not self.freshness_fence

    @property
    def provenance_known(self) -> bool:
        """Whether the receipt says exactly where its result came from.

        Every stamp is present and, for a worker final, so is its ``callback_result``.
        """
        return (
            self.sender_conversation_id is not None
            and self.run_public_id is not None
            and self.task_key is not None
            and (self.worker_final is None or self.worker_final.callback_result is not None)
        )

    @property
    def batchable(self) -> bool:
        """Whether this receipt may share a reply with any other: plain, known provenance."""
        return self.plain and self.provenance_known


def compatible(a: Receipt, b: Receipt) -> bool:
    """Whether two receipts may share one supplementary reply (M8).

    Both must be :attr:`~Receipt.batchable` (plain visible input with known result provenance),
    with identical principals and the same frozen environment (model intent and fallbacks,
    tools, approval mode). Then either they share their source run, or both are independent
    worker finals whose frozen original requester and execution memory context also match
    (each carries ``callback_result``, required by ``batchable``).

    Symmetric. Reflexive on batchable receipts; a receipt that is not batchable is compatible
    with nothing, not even an identical copy of itself. Not transitive: an ordinary receipt of
    run R, a worker final of R and a worker final of run S are compatible pair by pair except
    the first with the last -- which is why a batch checks every pair (:func:`next_batch`).
    """
    if not (a.batchable and b.batchable):
        return False
    if a.principals.identity != b.principals.identity or a.environment != b.environment:
        return False
    if a.run_public_id == b.run_public_id:
        return True
    wa, wb = a.worker_final, b.worker_final
    return (
        wa is not None
        and wb is not None
        and wa.requester == wb.requester
        and wa.memory_context == wb.memory_context
    )


def _check_read_order(receipts: Sequence[Receipt]) -> None:
    for earlier, later in itertools.pairwise(receipts):
        if later.queue_position <= earlier.queue_position:
            raise ValueError("receipts must be in read order (increasing queue_position)")


def next_batch(
    arrived: Sequence[Receipt],
    *,
    limit: int = MAX_BATCH_RECEIPTS,
    max_bytes: int = SNAPSHOT_LIMIT_BYTES,
) -> tuple[Receipt, ...]:
    """The receipts the next turn boundary takes together: a prefix of ``arrived``.

    ``arrived`` is the conversation's queued kernel mail in read order (M2), so arrival numbers
    strictly increase. The batch is the head plus each following receipt, in order, while that
    receipt is compatible with *every* receipt already taken, the batch holds fewer than
    ``limit`` receipts and the total ``content_bytes`` stays within ``max_bytes``. It stops at
    the first receipt that fails: nothing is skipped over or reordered, and nothing waits for
    more to arrive.

    Every pair is checked, not just each receipt against the head, because the rule is not
    transitive (see :func:`compatible`) and the reference requires the receipts sharing a reply
    to be "compatible callback inputs" -- with one another. An ordinary receipt of run R, a
    worker final of R and a worker final of run S would otherwise put two runs' receipts in a
    reply where "ordinary task and tool receipts require the same source run".

    The head alone is the answer when nothing else qualifies, including a head larger than
    ``max_bytes`` by itself (it must still be processed). Nothing arrived, nothing taken: ``()``.
    """
    if not 1 <= limit <= MAX_BATCH_RECEIPTS:
        raise ValueError(f"limit must be between 1 and {MAX_BATCH_RECEIPTS}")
    if max_bytes < 0:
        raise ValueError("max_bytes must not be negative")
    _check_read_order(arrived)
    if not arrived:
        return ()
    batch = [arrived[0]]
    total = arrived[0].content_bytes
    for receipt in arrived[1:]:
        if len(batch) >= limit or total + receipt.content_bytes > max_bytes:
            break
        if not all(compatible(member, receipt) for member in batch):
            break
        batch.append(receipt)
        total += receipt.content_bytes
    return tuple(batch)


def receipt_of(item: Input, *, owner: str) -> Receipt:
    """An arrived kernel input as a receipt: the answering conversation's owner answers it,
    its environment is the frozen one it carries (M5); without one it batches with nothing
    that carries one."""
    frozen = item.meta.get("environment")
    environment = (
        FrozenEnvironment(
            model=str(frozen.get("model", "")),
            fallbacks=tuple(str(m) for m in frozen.get("fallbacks", ())),
            tools=tuple(str(t) for t in frozen.get("tools", ())),
            approval_mode=str(frozen.get("approval_mode", "never")),
        ) if isinstance(frozen, dict)
        else FrozenEnvironment(model="", fallbacks=(), tools=(), approval_mode="unknown")
    )
    final = item.meta.get("worker_final")
    worker = (
        WorkerFinal(requester=str(final.get("requester", "")),
                    memory_context=str(final.get("memory_context", "")),
                    callback_result=(str(final["callback_result"])
                                     if final.get("callback_result") else None))
        if isinstance(final, dict) else None
    )
    return Receipt(
        input_id=item.input_id, queue_position=item.queue_position, origin=item.origin,
        principals=Principals(owner=owner, answerer=owner, authored_by=item.authored_by),
        environment=environment, sender_conversation_id=item.sender_conversation_id,
        run_public_id=item.run_public_id, task_key=item.task_key,
        content_bytes=len(item.content.encode("utf-8")), worker_final=worker,
    )


def mail_batch(inputs: Sequence[Input], *, owner: str) -> list[Input]:
    """What a mail turn takes at a turn boundary (M8): the head receipt and the contiguous,
    compatible ones after it, up to the limits -- never reaching past an incompatible one."""
    kernel = [i for i in inputs if i.origin.is_kernel]
    if not kernel:
        return []
    chosen = {r.input_id for r in next_batch([receipt_of(i, owner=owner) for i in kernel])}
    return [i for i in kernel if i.input_id in chosen]


def batches(
    arrived: Sequence[Receipt],
    *,
    limit: int = MAX_BATCH_RECEIPTS,
    max_bytes: int = SNAPSHOT_LIMIT_BYTES,
) -> list[tuple[Receipt, ...]]:
    """What successive turn boundaries would take if everything in ``arrived`` had arrived.

    :func:`next_batch` applied until nothing is left: the batches partition ``arrived`` in
    order (their concatenation is ``arrived``).
    """
    taken: list[tuple[Receipt, ...]] = []
    start = 0
    while start < len(arrived):
        batch = next_batch(arrived[start:], limit=limit, max_bytes=max_bytes)
        taken.append(batch)
        start += len(batch)
    return taken


# -- the supplementary reply -------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class CallbackSource:
    """One worker final's source, kept in a reply's ``callback_sources`` (M9)."""

    sender_conversation_id: ConversationId
    run_public_id: RunId
    task_key: str
    callback_result: str

    def as_meta(self) -> dict[str, str]:
        return {
            "sender_conversation_public_id": self.sender_conversation_id,
            "run_public_id": self.run_public_id,
            "task_key": self.task_key,
            "callback_result": self.callback_result,
        }


@dataclass(frozen=True, slots=True)
class ReplySources:
    """Whom a supplementary reply answers for: its singular sender fields and its sources.

    ``callback_sources`` lists every worker final in the batch, in batch order. When it holds
    more than one, the reply is a *combined* worker report: its singular sender fields are all
    ``None``, and the receiving conversation owns it -- stopping one source retracts nothing and
    does not cancel it once its results were consumed (M9, M14). Otherwise each singular field
    is the value every receipt in the batch shares, or ``None`` where they differ (several tasks
    of one run leave ``task_key`` empty), and the reply keeps its source's Stop fence.
    """

    sender_conversation_id: ConversationId | None
    run_public_id: RunId | None
    task_key: str | None
    callback_sources: tuple[CallbackSource, ...]

    @property
    def combined(self) -> bool:
        """Whether this is a combined report of several independent worker finals."""
        return len(self.callback_sources) > 1

    def as_meta(self) -> dict[str, Any]:
        """The fields as the kernel writes them into a message's meta."""
        return {
            "sender_conversation_public_id": self.sender_conversation_id,
            "run_public_id": self.run_public_id,
            "task_key": self.task_key,
            "callback_sources": [s.as_meta() for s in self.callback_sources],
        }


T = TypeVar("T")


def _shared(values: Sequence[T | None]) -> T | None:
    """The value every item holds, or ``None`` where they differ."""
    first = values[0]
    return first if all(v == first for v in values) else None


def combined_sources(batch: Sequence[Receipt]) -> ReplySources:
    """The sender fields and ``callback_sources`` of the reply a batch opens (M9)."""
    if not batch:
        raise ValueError("a batch holds at least one receipt")
    sources: list[CallbackSource] = []
    for r in batch:
        w = r.worker_final
        if (
            w is not None
            and w.callback_result is not None
            and r.sender_conversation_id is not None
            and r.run_public_id is not None
            and r.task_key is not None
        ):
            sources.append(
                CallbackSource(r.sender_conversation_id, r.run_public_id, r.task_key,
                               w.callback_result)
            )
    if len(sources) > 1:
        return ReplySources(None, None, None, tuple(sources))
    return ReplySources(
        _shared([r.sender_conversation_id for r in batch]),
        _shared([r.run_public_id for r in batch]),
        _shared([r.task_key for r in batch]),
        tuple(sources),
    )


@dataclass(frozen=True, slots=True)
class BatchPlan:
    """How a batch becomes the supplementary reply's messages (M8).

    Each receipt in ``individual`` becomes its own user-role message turn, in order; ``opener``
    is the trailing user message that opens the reply, whose history includes them. Every
    receipt keeps its own content and stamps on its own message; ``sources`` are the reply's.
    """

    individual: tuple[Receipt, ...]
    opener: Receipt
    sources: ReplySources

    @property
    def receipts(self) -> tuple[Receipt, ...]:
        """The batch, in order: the individual turns, then the opener."""
        return (*self.individual, self.opener)

    @property
    def lock_order(self) -> tuple[RunId, ...]:
        """The source runs, distinct and sorted: the stable order the store locks them in and
        checks each (not stopped) before anything is consumed."""
        return tuple(sorted({r.run_public_id for r in self.receipts if r.run_public_id}))

    def head_alone(self) -> BatchPlan:
        """The fallback when the batch cannot commit (a history cap, a raw profile, an
        unavailable model or a degraded reply): the original head, processed individually;
        the remaining receipts stay queued."""
        head = self.receipts[0]
        return BatchPlan((), head, combined_sources((head,)))


def plan_reply(batch: Sequence[Receipt]) -> BatchPlan:
    """The message plan of a batch :func:`next_batch` took.

    Raises ``ValueError`` for an empty batch, or one whose receipts are not pairwise
    compatible (such receipts never share a reply).
    """
    if not batch:
        raise ValueError("a batch holds at least one receipt")
    _check_read_order(batch)
    for i, a in enumerate(batch):
        for b in batch[i + 1:]:
            if not compatible(a, b):
                raise ValueError(
                    f"receipts {a.input_id} and {b.input_id} are not compatible (M8)"
                )
    return BatchPlan(tuple(batch[:-1]), batch[-1], combined_sources(batch))

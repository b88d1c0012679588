"""Result envelopes (SPEC R1-R4): background output kept encrypted, owner-scoped, bounded, paged.

- **Encrypted at rest (R1).** Each envelope is sealed with AES-256-GCM under a key derived
  (HKDF-SHA256) from the master key and the owning conversation, with a fresh random 96-bit
  nonce. The associated data binds the ciphertext to its result id and conversation, so a row
  copied onto another id or conversation does not open. The master key comes from the
  environment or a key file and is never written to the database.
- **Bounded (R1).** At most 2 MiB of plaintext; more is refused with a terminal failure receipt
  (an envelope with status ``failed`` and code ``result_too_large`` that holds no data). Every
  envelope has a deadline (7 days by default) after which readers no longer see it and the
  sweeper deletes it.
- **Nothing cut silently (R1).** What a writer had to leave out to stay within the bound is
  recorded with the envelope as :class:`Drop` spans (which part, which bytes): such a result's
  status is ``truncated``, never ``stored``, and its reference and every page say what is
  missing.
- **Owner scope (R2).** Only the owning conversation reads or lists its envelopes; any other
  caller gets :class:`UnknownResultError`, exactly as for an id that never existed.
- **Paging (R3).** Pages are bounded in bytes and never split a UTF-8 code point: a page ends at
  a code point boundary, and the next page starts where it ended.
- **Stated lifetime (R4).** A :class:`ResultRef` says whether it is ``durable`` (in the
  database until its deadline) or ``process_local`` (held in this process's memory, gone after
  a restart). Reading a result never starts work.
"""

from __future__ import annotations

import enum
import json
import secrets
from collections import OrderedDict
from dataclasses import dataclass
from datetime import timedelta

from cryptography.exceptions import InvalidTag

from tidings.clock import Clock, to_us
from tidings.errors import InvalidInputError

# The results' errors live in tidings.errors; re-exported (``as``) for callers of this module.
from tidings.errors import MasterKeyError as MasterKeyError
from tidings.errors import ResultCorruptError as ResultCorruptError
from tidings.errors import UnknownResultError as UnknownResultError

# The master key lives in tidings.records.master_key; re-exported for callers of this module.
from tidings.records.master_key import KEY_VERSION as KEY_VERSION
from tidings.records.master_key import MASTER_KEY_ENV as MASTER_KEY_ENV
from tidings.records.master_key import MASTER_KEY_FILE_ENV as MASTER_KEY_FILE_ENV
from tidings.records.master_key import MasterKey as MasterKey
from tidings.store import Row, Store, Tx
from tidings.support.policy import check_cursor, check_id
from tidings.types import ConversationId, new_id

_NONCE_BYTES = 12

STORED = "stored"
TRUNCATED = "truncated"
FAILED = "failed"


class Lifetime(enum.StrEnum):
    DURABLE = "durable"
    PROCESS_LOCAL = "process_local"


@dataclass(frozen=True, slots=True)
class ResultsConfig:
    limit_bytes: int = 2 * 1024 * 1024
    retention: timedelta = timedelta(days=7)
    page_limit_bytes: int = 64 * 1024
    purge_batch: int = 1_000
    opened_cache: int = 8


@dataclass(frozen=True, slots=True)
class Drop:
    """Bytes ``[from_byte, to_byte)`` of one stream of a result's source (``stdout``,
    ``stderr``) that were not kept: the result holds what came before and after them."""

    stream: str
    from_byte: int
    to_byte: int

    def __post_init__(self) -> None:
        if not 0 <= self.from_byte < self.to_byte:
            raise InvalidInputError(f"a drop spans at least one byte, not {self}")

    @property
    def dropped_bytes(self) -> int:
        return self.to_byte - self.from_byte

    def statement(self) -> str:
        """In words: how many bytes of which stream were dropped, and where."""
        return (f"dropped {self.dropped_bytes:,} bytes of {self.stream} "
                f"between byte {self.from_byte:,} and byte {self.to_byte:,}")


def drops_to_json(drops: tuple[Drop, ...]) -> str:
    return json.dumps([{"stream": d.stream, "from_byte": d.from_byte, "to_byte": d.to_byte}
                       for d in drops])


def drops_from_json(text: str | None) -> tuple[Drop, ...]:
    if not text:
        return ()
    return tuple(Drop(str(d["stream"]), int(d["from_byte"]), int(d["to_byte"]))
                 for d in json.loads(text))


def dropped_from(tx: Tx, result_id: str) -> tuple[Drop, ...]:
    """What the result ``result_id`` is missing, read in the caller's unit (no decryption;
    the caller has already scoped the id to its conversation)."""
    row = tx.one("result_drops", result_id=result_id)
    return () if row is None else drops_from_json(row["drops"])


@dataclass(frozen=True, slots=True)
class ResultRef:
    """A reference the model or a caller can hold: what it is and how long it lives.

    ``status`` is ``stored`` (the data whole), ``truncated`` (stored, but its writer dropped
    the bytes ``dropped`` names) or ``failed`` (no data; see ``failure_code``).
    """

    result_id: str
    conversation_id: ConversationId
    lifetime: Lifetime
    status: str
    size_bytes: int
    expires_at_us: int | None
    failure_code: str | None = None
    task_key: str | None = None
    dropped: tuple[Drop, ...] = ()

    @property
    def durable(self) -> bool:
        return self.lifetime is Lifetime.DURABLE

    @property
    def dropped_bytes(self) -> int:
        return sum(d.dropped_bytes for d in self.dropped)


@dataclass(frozen=True, slots=True)
class ResultPage:
    """``text`` is bytes ``[offset, next_offset)`` of the result, decoded; ``next_offset`` is
    None on the last page. ``dropped`` is what the whole result is missing (on every page)."""

    result_id: str
    offset: int
    next_offset: int | None
    size_bytes: int
    text: str
    status: str = STORED
    dropped: tuple[Drop, ...] = ()


def utf8_boundary(data: bytes, end: int) -> int:
    """The greatest position <= ``end`` that does not fall inside a UTF-8 code point."""
    end = min(end, len(data))
    if end == len(data) or (data[end] & 0xC0) != 0x80:
        return end
    # ``end`` is a continuation byte (0b10xxxxxx): step back to its code point's lead byte,
    # which is at most three bytes back in valid UTF-8.
    back = end
    while back > 0 and end - back < 3 and (data[back] & 0xC0) == 0x80:
        back -= 1
    return end if (data[back] & 0xC0) == 0x80 else back


def page_bounds(data: bytes, offset: int, limit: int) -> tuple[int, int]:
    """The byte range of the page starting at ``offset``: at most ``limit`` bytes, ending at a
    code point boundary (at least one whole code point, so paging always moves on)."""
    if offset < 0 or offset > len(data):
        raise InvalidInputError(f"offset {offset} is outside the result ({len(data)} bytes)")
    if utf8_boundary(data, offset) != offset:
        raise InvalidInputError(f"offset {offset} is inside a UTF-8 code point")
    if limit < 4:
        raise InvalidInputError("a page holds at least 4 bytes")
    end = min(len(data), offset + limit)
    cut = utf8_boundary(data, end)
    if cut <= offset:  # a run of continuation bytes (not UTF-8): never stall
        cut = end
    return offset, cut


class Results:
    """Sealing, reading, listing and purging result envelopes."""

    def __init__(
        self,
        store: Store,
        clock: Clock,
        master_key: MasterKey,
        config: ResultsConfig | None = None,
    ) -> None:
        self.store = store
        self.clock = clock
        self.config = config or ResultsConfig()
        self._key = master_key
        self._local: dict[str, tuple[ResultRef, bytes]] = {}
        # Recently opened envelopes, so paging through one decrypts it once (bounded).
        self._opened: OrderedDict[tuple[str, str], tuple[ResultRef, bytes]] = OrderedDict()

    # -- sealing ------------------------------------------------------------------------------

    def seal(
        self,
        tx: Tx,
        conversation_id: str,
        data: bytes,
        *,
        task_key: str | None = None,
        run_id: str | None = None,
        dropped: tuple[Drop, ...] = (),
    ) -> ResultRef:
        """Store ``data`` for ``conversation_id`` inside the caller's unit.

        ``dropped`` names what the writer left out of ``data`` (the result is then
        ``truncated``). Data over the limit is not stored: a ``failed`` receipt with
        ``result_too_large`` takes its place, and says how large the data was.
        """
        check_id(conversation_id, "conversation id")
        result_id = new_id("res")
        now = self.clock.now_us()
        expires = now + to_us(self.config.retention)
        if len(data) > self.config.limit_bytes:
            status, code, nonce, sealed, dropped = FAILED, "result_too_large", None, None, ()
        else:
            status, code = STORED, None
            nonce = secrets.token_bytes(_NONCE_BYTES)
            sealed = self._key.envelope_key(conversation_id).encrypt(
                nonce, data, _aad(result_id, conversation_id)
            )
        tx.run_later(
            "insert_result", result_id=result_id, conversation_id=conversation_id,
            task_key=task_key, run_id=run_id, status=status, failure_code=code,
            size_bytes=len(data), key_version=KEY_VERSION, nonce=nonce, ciphertext=sealed,
            now_us=now, expires_at_us=expires,
        )
        if dropped:
            tx.run_later("insert_result_drops", result_id=result_id,
                         drops=drops_to_json(dropped), expires_at_us=expires)
        return ResultRef(result_id, ConversationId(conversation_id), Lifetime.DURABLE,
                         _status(status, dropped), len(data), expires, code, task_key, dropped)

    async def put(
        self,
        conversation_id: str,
        data: bytes,
        *,
        task_key: str | None = None,
        run_id: str | None = None,
        dropped: tuple[Drop, ...] = (),
    ) -> ResultRef:
        """:meth:`seal` in a unit of its own."""
        return await self.store.transact(
            lambda tx: self.seal(tx, conversation_id, data, task_key=task_key, run_id=run_id,
                                 dropped=dropped),
            route=conversation_id,
        )

    def keep_local(self, conversation_id: str, data: bytes, *, task_key: str | None = None,
                   dropped: tuple[Drop, ...] = ()) -> ResultRef:
        """Hold a result in this process only (it is gone after a restart, and says so)."""
        check_id(conversation_id, "conversation id")
        if len(data) > self.config.limit_bytes:
            ref = ResultRef(new_id("res"), ConversationId(conversation_id),
                            Lifetime.PROCESS_LOCAL, FAILED, len(data), None,
                            "result_too_large", task_key)
            self._local[ref.result_id] = (ref, b"")
            return ref
        ref = ResultRef(new_id("res"), ConversationId(conversation_id), Lifetime.PROCESS_LOCAL,
                        _status(STORED, dropped), len(data), None, None, task_key, dropped)
        self._local[ref.result_id] = (ref, data)
        return ref

    # -- reading ------------------------------------------------------------------------------

    async def get(self, conversation_id: str, result_id: str) -> tuple[ResultRef, bytes]:
        """The reference and the plaintext, for the owning conversation only."""
        check_id(conversation_id, "conversation id")
        check_id(result_id, "result id")
        local = self._local.get(result_id)
        if local is not None:
            if local[0].conversation_id != conversation_id:
                raise UnknownResultError(result_id)
            return local
        now = self.clock.now_us()
        row = await self.store.read(
            lambda tx: tx.one("get_result", result_id=result_id,
                              conversation_id=conversation_id, now_us=now)
        )
        if row is None:
            raise UnknownResultError(result_id)
        ref = _ref(row)
        if row["status"] != STORED:
            return ref, b""
        try:
            data = self._key.envelope_key(conversation_id, int(row["key_version"])).decrypt(
                bytes(row["nonce"]), bytes(row["ciphertext"]), _aad(result_id, conversation_id)
            )
        except InvalidTag:
            raise ResultCorruptError(
                f"result {result_id!r} failed authentication (altered, or another key)"
            ) from None
        return ref, data

    async def page(
        self, conversation_id: str, result_id: str, *, offset: int = 0,
        limit_bytes: int | None = None,
    ) -> ResultPage:
        """One page of a result's text, bounded in bytes, never splitting a code point."""
        limit = self.config.page_limit_bytes if limit_bytes is None else limit_bytes
        ref, data = await self._opened_result(conversation_id, result_id)
        start, end = page_bounds(data, offset, limit)
        return ResultPage(
            result_id=ref.result_id,
            offset=start,
            next_offset=end if end < len(data) else None,
            size_bytes=len(data),
            text=data[start:end].decode("utf-8", "replace"),
            status=ref.status,
            dropped=ref.dropped,
        )

    async def _opened_result(
        self, conversation_id: str, result_id: str
    ) -> tuple[ResultRef, bytes]:
        key = (conversation_id, result_id)
        cached = self._opened.pop(key, None)
        now = self.clock.now_us()
        if cached is None or (
            cached[0].expires_at_us is not None and cached[0].expires_at_us <= now
        ):
            cached = await self.get(conversation_id, result_id)
        self._opened[key] = cached
        while len(self._opened) > self.config.opened_cache:
            self._opened.popitem(last=False)
        return cached

    async def list(
        self, conversation_id: str, *, after: str = "", limit: int = 100
    ) -> list[ResultRef]:
        """The owning conversation's results (durable and process-local), oldest first."""
        check_id(conversation_id, "conversation id")
        check_cursor(after, "after")
        if not 1 <= limit <= 1_000:
            raise InvalidInputError("limit must be between 1 and 1000")
        now = self.clock.now_us()
        rows = await self.store.read(
            lambda tx: tx.all("list_results", conversation_id=conversation_id, now_us=now,
                              after=after, limit=limit)
        )
        refs = [_ref(r) for r in rows]
        refs += [ref for ref, _ in self._local.values()
                 if ref.conversation_id == conversation_id and ref.result_id > after]
        refs.sort(key=lambda r: r.result_id)
        return refs[:limit]

    # -- the sweeper --------------------------------------------------------------------------

    async def purge(self) -> int:
        """Delete envelopes past their deadline; returns how many."""
        purged = 0
        now = self.clock.now_us()
        while True:
            batch = await self.store.transact(
                lambda tx: tx.execute("purge_results", now_us=now,
                                      limit=self.config.purge_batch)
            )
            purged += batch
            if batch < self.config.purge_batch:
                break
        while await self.store.transact(
            lambda tx: tx.execute("purge_result_drops", now_us=now,
                                  limit=self.config.purge_batch)
        ) == self.config.purge_batch:
            pass
        return purged


def _aad(result_id: str, conversation_id: str) -> bytes:
    return f"{result_id}\x00{conversation_id}".encode()


def _status(stored_status: str, dropped: tuple[Drop, ...]) -> str:
    # The table keeps ``stored`` for data that is there; what was dropped lives beside it.
    return TRUNCATED if stored_status == STORED and dropped else stored_status


def _ref(row: Row) -> ResultRef:
    dropped = drops_from_json(row["drops"])
    return ResultRef(
        result_id=row["result_id"],
        conversation_id=ConversationId(row["conversation_id"]),
        lifetime=Lifetime.DURABLE,
        status=_status(row["status"], dropped),
        size_bytes=int(row["size_bytes"]),
        expires_at_us=int(row["expires_at_us"]),
        failure_code=row["failure_code"],
        task_key=row["task_key"],
        dropped=dropped,
    )

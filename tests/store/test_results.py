"""R1-R4: result envelopes are encrypted at rest, bounded, owner-scoped, paged on code point
boundaries, state their lifetime, and expire."""

from __future__ import annotations

import sqlite3
from datetime import timedelta
from pathlib import Path

import psycopg
import pytest

from tests.conftest import Backend, RuntimeFactory
from tidings.clock import ManualClock
from tidings.errors import InvalidInputError
from tidings.models.scripted import ScriptedModel
from tidings.records.results import (
    Lifetime,
    MasterKey,
    MasterKeyError,
    ResultCorruptError,
    Results,
    ResultsConfig,
    UnknownResultError,
    page_bounds,
)
from tidings.store import Store
from tidings.types import Profile

OWNER = "conv_owner"
OTHER = "conv_other"
SECRET_TEXT = "deploy log: the token was rotated ✓ — naïve café 🚀"


def results(store: Store, clock: ManualClock, key: MasterKey | None = None,
            **config: object) -> Results:
    return Results(store, clock, key or KEY, ResultsConfig(**config))  # type: ignore[arg-type]


KEY = MasterKey.generate()


def raw_rows(backend: Backend) -> list[tuple[bytes, bytes]]:
    if backend.name == "sqlite":
        with sqlite3.connect(backend.url) as conn:
            return [(bytes(n), bytes(c)) for n, c in conn.execute(
                "SELECT nonce, ciphertext FROM result_envelopes WHERE status = 'stored'")]
    with psycopg.connect(backend.url) as conn:
        return [(bytes(n), bytes(c)) for n, c in conn.execute(
            "SELECT nonce, ciphertext FROM result_envelopes WHERE status = 'stored'")]


async def test_r1_envelope_is_encrypted_at_rest_and_opens_for_its_owner(
    backend: Backend, store: Store, clock: ManualClock
) -> None:
    r = results(store, clock)
    data = SECRET_TEXT.encode()
    ref = await r.put(OWNER, data, task_key="build")
    assert ref.lifetime is Lifetime.DURABLE
    assert ref.durable
    assert ref.status == "stored"
    assert ref.size_bytes == len(data)
    got_ref, got = await r.get(OWNER, ref.result_id)
    assert got == data
    assert got_ref.task_key == "build"
    [(nonce, ciphertext)] = raw_rows(backend)
    assert data not in ciphertext
    assert b"token" not in ciphertext
    assert len(nonce) == 12
    assert len(ciphertext) == len(data) + 16  # the GCM tag


async def test_r1_fresh_nonce_per_envelope(
    backend: Backend, store: Store, clock: ManualClock
) -> None:
    r = results(store, clock)
    for _ in range(5):
        await r.put(OWNER, b"same bytes every time")
    rows = raw_rows(backend)
    assert len({n for n, _ in rows}) == 5
    assert len({c for _, c in rows}) == 5


async def test_r1_wrong_master_key_cannot_open(store: Store, clock: ManualClock) -> None:
    ref = await results(store, clock).put(OWNER, b"payload")
    with pytest.raises(ResultCorruptError):
        await results(store, clock, MasterKey.generate()).get(OWNER, ref.result_id)


async def test_r1_over_the_bound_gives_a_failure_receipt(
    backend: Backend, store: Store, clock: ManualClock
) -> None:
    r = results(store, clock, limit_bytes=1024)
    ref = await r.put(OWNER, b"x" * 1025)
    assert ref.status == "failed"
    assert ref.failure_code == "result_too_large"
    assert ref.size_bytes == 1025
    got_ref, got = await r.get(OWNER, ref.result_id)
    assert (got_ref.status, got) == ("failed", b"")
    assert raw_rows(backend) == []  # nothing of the data was kept
    exact = await r.put(OWNER, b"y" * 1024)
    assert exact.status == "stored"


async def test_r1_expired_envelopes_vanish_and_are_purged(
    store: Store, clock: ManualClock
) -> None:
    r = results(store, clock)
    old = await r.put(OWNER, b"old")
    clock.advance(timedelta(days=6))
    young = await r.put(OWNER, b"young")
    clock.advance(timedelta(days=1, seconds=1))
    with pytest.raises(UnknownResultError):
        await r.get(OWNER, old.result_id)
    assert [x.result_id for x in await r.list(OWNER)] == [young.result_id]
    assert await r.purge() == 1
    assert (await r.get(OWNER, young.result_id))[1] == b"young"


async def test_r2_another_conversation_learns_nothing(store: Store, clock: ManualClock) -> None:
    r = results(store, clock)
    ref = await r.put(OWNER, b"private")
    local = r.keep_local(OWNER, b"private too")
    for result_id in (ref.result_id, local.result_id):
        with pytest.raises(UnknownResultError) as foreign:
            await r.get(OTHER, result_id)
        with pytest.raises(UnknownResultError) as unknown:
            await r.get(OTHER, "res_does_not_exist")
        # The same answer, word for word, apart from the id the caller itself supplied.
        assert foreign.value.code == unknown.value.code
        assert str(foreign.value).replace(result_id, "X") == str(unknown.value).replace(
            "res_does_not_exist", "X")
        with pytest.raises(UnknownResultError):
            await r.page(OTHER, result_id)
    assert await r.list(OTHER) == []
    assert {x.result_id for x in await r.list(OWNER)} == {ref.result_id, local.result_id}


async def test_r2_envelope_moved_to_another_conversation_does_not_open(
    backend: Backend, store: Store, clock: ManualClock
) -> None:
    r = results(store, clock)
    ref = await r.put(OWNER, b"bound to its owner")
    statement = "UPDATE result_envelopes SET conversation_id = 'conv_other'"
    if backend.name == "sqlite":
        with sqlite3.connect(backend.url) as conn:
            conn.execute(statement)
    else:
        with psycopg.connect(backend.url) as conn:
            conn.execute(statement)
    with pytest.raises(ResultCorruptError):
        await r.get(OTHER, ref.result_id)


async def test_r3_pages_are_bounded_and_never_split_a_code_point(
    store: Store, clock: ManualClock
) -> None:
    r = results(store, clock)
    text = (SECRET_TEXT * 40)
    ref = await r.put(OWNER, text.encode())
    pieces: list[str] = []
    offset: int | None = 0
    while offset is not None:
        page = await r.page(OWNER, ref.result_id, offset=offset, limit_bytes=7)
        assert len(page.text.encode()) <= 7
        assert "\ufffd" not in page.text
        pieces.append(page.text)
        offset = page.next_offset
    assert "".join(pieces) == text
    with pytest.raises(InvalidInputError):
        await r.page(OWNER, ref.result_id, offset=len(SECRET_TEXT.encode()) + 10_000_000)


async def test_r4_references_state_their_lifetime(store: Store, clock: ManualClock) -> None:
    r = results(store, clock)
    durable = await r.put(OWNER, b"kept")
    local = r.keep_local(OWNER, b"in memory")
    assert durable.lifetime is Lifetime.DURABLE
    assert durable.expires_at_us is not None
    assert local.lifetime is Lifetime.PROCESS_LOCAL
    assert local.expires_at_us is None
    assert (await r.get(OWNER, local.result_id))[1] == b"in memory"
    # A new process (a new Results over the same database) has the durable one only.
    restarted = results(store, clock)
    assert (await restarted.get(OWNER, durable.result_id))[1] == b"kept"
    with pytest.raises(UnknownResultError):
        await restarted.get(OWNER, local.result_id)


def test_r1_master_key_from_environment_or_file(tmp_path: Path) -> None:
    key = MasterKey.generate()
    assert MasterKey.from_environment({"TIDINGS_MASTER_KEY": key.secret.hex()}) == key
    path = tmp_path / "key"
    path.write_text(key.secret.hex() + "\n")
    assert MasterKey.from_environment({"TIDINGS_MASTER_KEY_FILE": str(path)}) == key
    for bad in ({}, {"TIDINGS_MASTER_KEY": "short"},
                {"TIDINGS_MASTER_KEY_FILE": str(tmp_path / "missing")}):
        with pytest.raises(MasterKeyError):
            MasterKey.from_environment(bad)
    assert key.secret.hex() not in repr(key)


def test_r3_page_bounds_never_split_and_always_advance() -> None:
    data = "a€😀b".encode()  # 1 + 3 + 4 + 1 bytes
    assert page_bounds(data, 0, 4) == (0, 4)      # "a€"
    assert page_bounds(data, 4, 4) == (4, 8)      # "😀"
    assert page_bounds(data, 4, 5) == (4, 9)      # "😀b"
    assert page_bounds(data, 8, 4) == (8, 9)
    with pytest.raises(InvalidInputError):
        page_bounds(data, 2, 4)                   # inside "€"
    junk = b"\x80" * 10                           # not UTF-8 at all: still moves on
    assert page_bounds(junk, 0, 4) == (0, 4)


async def test_r2_runtime_results_are_scoped_to_their_conversation(
    runtimes: RuntimeFactory,
) -> None:
    rt = await runtimes(models=[ScriptedModel()], master_key=KEY)
    mine = (await rt.create_conversation("alice", Profile(model="scripted"))).conversation_id
    theirs = (await rt.create_conversation("bob", Profile(model="scripted"))).conversation_id
    ref = await rt.keyring.results().put(mine, b"alice's build log")
    assert (await rt.results.get(mine, ref.result_id))[1] == b"alice's build log"
    with pytest.raises(UnknownResultError):
        await rt.results.get(theirs, ref.result_id)

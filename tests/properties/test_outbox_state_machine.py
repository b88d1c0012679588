"""Deliveries and leases against a plain Python model, on both backends (hypothesis).

The machine publishes, claims, extends, acks, releases, sweeps, moves the manual clock and
restarts the outbox (a clean stop and a new boot on the same database), in any order, with
stale leases kept around to be used again. After every step the database must hold exactly
the states the model predicts. Each run gets a fresh database (a new SQLite file, or the
PostgreSQL test database emptied) and its own event loop.

Random steps seldom line up S6's hardest case -- a lease expires, another holder reclaims its
signals, and the old holder acks with its stale token -- so one rule makes it on purpose
whenever a lease is held (``expire_reclaim_stale_ack``). A mutant store whose ack skips the
token or the deadline check must fail this machine on every seed:
``python -m tests.properties.mutants --seeds 1,2,3,4,5`` (see that module).

Time moves in whole seconds and retries back off by between 0.5 s and 1 s, so whether a
released signal is claimable again is decided, whatever the jitter drew.
"""

from __future__ import annotations

import asyncio
import random
import shutil
import tempfile
from collections.abc import Coroutine, Iterator
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path
from typing import Any, ClassVar, TypeVar

import psycopg
import pytest
from hypothesis import HealthCheck, event, settings
from hypothesis import strategies as st
from hypothesis.stateful import (
    RuleBasedStateMachine,
    initialize,
    invariant,
    precondition,
    rule,
    run_state_machine_as_test,
)

from tests.conftest import drop_postgres_database, fresh_postgres_database
from tidings import (
    BacklogFullError,
    InstanceNotRunningError,
    Lease,
    ManualClock,
    Outbox,
    OutboxConfig,
    StaleLeaseError,
    Store,
    Tx,
    UnknownOperationError,
    open_store,
)
from tidings.clock import to_us
from tidings.records import operations
from tidings.support.policy import encode_json

T = TypeVar("T")

SECOND_US = 1_000_000
LEASE_TTL = timedelta(seconds=5)
BACKOFF = timedelta(seconds=1)  # base == cap: every retry waits 0.5 s to 1 s
CONFIG = OutboxConfig(
    backlog_limit=5,
    claim_max_count=3,
    lease_ttl=LEASE_TTL,
    max_attempts=2,
    backoff_base=BACKOFF,
    backoff_cap=BACKOFF,
)
CONVERSATIONS = ("conv-a", "conv-b")
KEYS = (None, None, None, "k1", "k2")  # mostly unkeyed; a key now and then repeats
LIVE = ("ready", "leased")


@dataclass
class Model:
    """What the model believes about one delivery."""

    delivery_id: int
    event_id: str
    seq: int
    conversation_id: str
    payload_bytes: int
    published_at_us: int
    state: str = "ready"
    attempts: int = 0
    token: str | None = None
    deadline_us: int | None = None
    claimable_at_us: int = 0
    failure_code: str | None = None

    def held_by(self, lease: Lease, now_us: int) -> bool:
        return (
            self.state == "leased"
            and self.token == lease.token
            and self.deadline_us is not None
            and self.deadline_us > now_us
        )


class Fresh:
    """Hands each run a fresh database: a new SQLite file, or an emptied PostgreSQL database.

    Creating a PostgreSQL database costs a checkpoint (about half a second); emptying every
    table of one migrated database (identities restarted) gives a run the same fresh start.
    PostgreSQL steps are slower too, so it gets fewer runs.
    """

    def __init__(self, postgres_url: str | None = None) -> None:
        self.postgres_url = postgres_url
        self.max_examples = 60 if postgres_url is None else 20

    def new_url(self) -> str:
        if self.postgres_url is None:
            return str(Path(tempfile.mkdtemp(prefix="tidings-sm-")) / "tidings.db")
        with psycopg.connect(self.postgres_url, autocommit=True) as conn:
            tables = [
                row[0] for row in conn.execute(
                    "SELECT quote_ident(tablename) FROM pg_tables WHERE schemaname = 'public' "
                    "AND tablename != 'schema_migrations'"
                )
            ]
            conn.execute(f"TRUNCATE {', '.join(tables)} RESTART IDENTITY CASCADE")
        return self.postgres_url

    def drop(self, url: str) -> None:
        if self.postgres_url is None:
            shutil.rmtree(Path(url).parent, ignore_errors=True)


class OutboxMachine(RuleBasedStateMachine):
    fresh: ClassVar[Fresh]

    def __init__(self) -> None:
        super().__init__()
        self.runner = asyncio.Runner()
        self.clock = ManualClock()
        self.url = self.fresh.new_url()
        self.store: Store = self.run(open_store(self.url))
        self.outbox: Outbox | None = None
        self.outbox = self.run(self.boot())
        self.deliveries: dict[int, Model] = {}
        self.keys: dict[tuple[str, str], int] = {}
        self.leases: list[Lease] = []
        self.n = 0

    # -- plumbing ------------------------------------------------------------------------------

    def run(self, coro: Coroutine[Any, Any, T]) -> T:
        return self.runner.run(coro)

    async def boot(self) -> Outbox:
        ob = Outbox(self.store, clock=self.clock, config=CONFIG, rng=random.Random(0))
        report = await ob.instance.start()
        # Every earlier boot stopped cleanly and settled its own leases: nobody is gone.
        assert report.gone_instances == ()
        return ob

    @property
    def ob(self) -> Outbox:
        assert self.outbox is not None
        return self.outbox

    def now(self) -> int:
        return self.clock.now_us()

    def teardown(self) -> None:
        try:
            if self.outbox is not None:
                self.run(self.outbox.instance.close())
            self.run(self.store.close())
        finally:
            self.runner.close()
            self.fresh.drop(self.url)

    def live(self, conversation_id: str | None = None) -> list[Model]:
        return [
            d for d in self.deliveries.values()
            if d.state in LIVE and conversation_id in (None, d.conversation_id)
        ]

    def lease(self, data: st.DataObject) -> Lease:
        """Usually the newest lease; often an older one, perhaps long stale."""
        newest = data.draw(st.booleans(), label="newest lease")
        return data.draw(st.sampled_from(self.leases[-1:] if newest else self.leases))

    def pick(self, data: st.DataObject, lease: Lease) -> list[int] | None:
        """All of a lease's deliveries (None), or a non-empty subset of them."""
        if data.draw(st.booleans(), label="whole lease"):
            return None
        ids = data.draw(
            st.lists(st.sampled_from(lease.delivery_ids), min_size=1, unique=True),
            label="subset",
        )
        return [int(i) for i in ids]

    # -- rules ---------------------------------------------------------------------------------

    @initialize(
        signals=st.lists(
            st.tuples(st.sampled_from(CONVERSATIONS), st.integers(min_value=0, max_value=60)),
            max_size=6,
        )
    )
    def seed(self, signals: list[tuple[str, int]]) -> None:
        """Start most runs with a few signals, so that every rule has something to act on."""
        for conversation, pad in signals:
            self.publish_one(conversation, None, pad)

    @rule(
        conversation=st.sampled_from(CONVERSATIONS),
        signals=st.lists(
            st.tuples(st.sampled_from(KEYS), st.integers(min_value=0, max_value=60)),
            min_size=1, max_size=2,
        ),
    )
    def publish(self, conversation: str, signals: list[tuple[str | None, int]]) -> None:
        for key, pad in signals:
            self.publish_one(conversation, key, pad)

    def publish_one(self, conversation: str, key: str | None, pad: int) -> None:
        self.n += 1
        payload = {"task_key": f"t{self.n}", "pad": "x" * pad}
        first = None if key is None else self.keys.get((conversation, key))
        full = len(self.live(conversation)) >= CONFIG.backlog_limit

        def unit(tx: Tx) -> Any:
            return self.ob.publish(tx, conversation, "task.exited", payload,
                                   idempotency_key=key)

        if first is None and full:
            event("publish: refused, backlog full")
            with pytest.raises(BacklogFullError):
                self.run(self.ob.store.transact(unit))  # refused, never dropped to make room
            return
        published = self.run(self.ob.store.transact(unit))
        if first is not None:  # S4: the first event, and no second delivery
            event("publish: duplicate key")
            assert not published.created
            assert published.delivery_id == first
            assert published.event_id == self.deliveries[first].event_id
            return
        assert published.created
        assert published.delivery_id not in self.deliveries
        assert all(published.seq > d.seq for d in self.deliveries.values())
        self.deliveries[published.delivery_id] = Model(
            published.delivery_id, published.event_id, published.seq, conversation,
            encode_json(payload, "payload", limit_bytes=CONFIG.payload_limit_bytes)[1],
            self.now(), claimable_at_us=self.now(),
        )
        if key is not None:
            self.keys[(conversation, key)] = published.delivery_id

    @rule(
        conversation=st.sampled_from(CONVERSATIONS),
        max_count=st.none() | st.integers(min_value=1, max_value=3),
        max_bytes=st.none() | st.sampled_from([40, 80, 120]),
    )
    def claim(self, conversation: str, max_count: int | None, max_bytes: int | None) -> None:
        self.claim_one(conversation, max_count, max_bytes)

    def claim_one(
        self, conversation: str, max_count: int | None = None, max_bytes: int | None = None
    ) -> Lease:
        """Claim, and hold the outcome to the model's prediction; returns the lease."""
        now = self.now()
        ready = sorted(
            (d for d in self.live(conversation)
             if d.claimable_at_us <= now and d.attempts < CONFIG.max_attempts),
            key=lambda d: d.seq,
        )[: max_count or CONFIG.claim_max_count]
        expected: list[Model] = []
        running = 0
        for m in ready:
            running += m.payload_bytes
            if expected and running > (max_bytes or CONFIG.claim_max_bytes):
                break
            expected.append(m)

        lease = self.run(self.ob.claim(conversation, max_count=max_count, max_bytes=max_bytes))
        got = lease.deliveries
        event(f"claim: {len(got)} deliveries")
        if any(d.attempts > 1 for d in got):
            event("claim: a redelivery")
        assert [d.delivery_id for d in got] == [m.delivery_id for m in expected]
        # S5: journal order within the batch, never anything else.
        assert [d.seq for d in got] == sorted(d.seq for d in got)
        assert [d.queue_seq for d in got] == sorted(d.queue_seq for d in got)
        assert lease.deadline_us == now + to_us(LEASE_TTL)
        assert all(lease.token != old.token for old in self.leases)  # a fresh token each time
        for delivery, m in zip(got, expected, strict=True):
            assert delivery.event_id == m.event_id  # S4: redelivery keeps the event id
            assert delivery.conversation_id == conversation
            m.state, m.attempts, m.token = "leased", m.attempts + 1, lease.token
            m.deadline_us = m.claimable_at_us = lease.deadline_us
            assert delivery.attempts == m.attempts
        if got:
            self.leases.append(lease)
        return lease

    @precondition(lambda self: self.leases)
    @rule(data=st.data())
    def extend(self, data: st.DataObject) -> None:
        lease = self.lease(data)
        now = self.now()
        held = [self.deliveries[i] for i in lease.delivery_ids]
        current = all(d.held_by(lease, now) for d in held)
        event(f"extend: {'current' if current else 'stale'} token")
        if current:
            extended = self.run(self.ob.extend(lease))
            assert extended.deadline_us == now + to_us(LEASE_TTL)
            for d in held:
                d.deadline_us = d.claimable_at_us = extended.deadline_us
        else:
            with pytest.raises(StaleLeaseError):  # S6: and it changes nothing
                self.run(self.ob.extend(lease))

    @precondition(lambda self: self.leases)
    @rule(data=st.data())
    def ack(self, data: st.DataObject) -> None:
        lease = self.lease(data)
        self.ack_with(lease, self.pick(data, lease))

    def ack_with(self, lease: Lease, ids: list[int] | None) -> bool:
        """Ack (all of the lease, or ``ids``) with the consumer's own write in the same unit:
        both commit if the token holds them, neither if it does not. Returns which it was."""
        chosen = [self.deliveries[i] for i in (ids or lease.delivery_ids)]
        turn: list[str] = []

        def unit(tx: Tx) -> None:
            # The turn's own write commits with the ack, or not at all (S7).
            turn.append(operations.accept(tx, self.ob.instance, "turn", "run-1").operation_id)
            self.ob.ack(tx, lease, ids)

        current = all(d.held_by(lease, self.now()) for d in chosen)
        event(f"ack: {'current' if current else 'stale'} token")
        if current:
            self.run(self.ob.store.transact(unit))
            assert self.run(operations.get(self.ob.store, turn[0])).operation_id == turn[0]
            for d in chosen:
                assert d.state != "acknowledged"  # never acknowledged twice
                d.state, d.deadline_us, d.claimable_at_us = "acknowledged", None, 0
        else:
            with pytest.raises(StaleLeaseError):
                self.run(self.ob.store.transact(unit))
            with pytest.raises(UnknownOperationError):
                self.run(operations.get(self.ob.store, turn[0]))
        return current

    def reclaimable(self) -> list[Lease]:
        """Leases still held now whose signals another holder could take once they expire
        (some attempt budget left)."""
        now = self.now()
        return [
            lease for lease in self.leases
            if any(self.deliveries[i].held_by(lease, now)
                   and self.deliveries[i].attempts < CONFIG.max_attempts
                   for i in lease.delivery_ids)
        ]

    @precondition(lambda self: self.reclaimable())
    @rule(data=st.data())
    def expire_reclaim_stale_ack(self, data: st.DataObject) -> None:
        """S6's hard case, made on purpose: a holder's lease expires (to the microsecond), it
        tries to ack with its expired token, another holder reclaims the signals, and the old
        holder acks, extends and releases with its stale token. Every stale call fails and
        changes nothing; the new holder's ack then holds."""
        old = data.draw(st.sampled_from(self.reclaimable()), label="expiring lease")
        # Its deadline is its deliveries' (an extend moved it past the one the lease came with).
        deadline = max(self.deliveries[i].deadline_us or 0 for i in old.delivery_ids)
        self.clock.advance(timedelta(microseconds=deadline - self.now()))
        assert not self.ack_with(old, None)  # expired, not reclaimed yet: still stale
        taken: list[int] = []
        new: Lease | None = None
        for _ in range(len(self.deliveries)):  # claims go in journal order: ours come
            new = self.claim_one(old.conversation_id)
            taken = [i for i in old.delivery_ids if self.deliveries[i].token == new.token]
            if taken or not new.deliveries:
                break
        assert taken, "an expired lease's signals with attempts left are reclaimable"
        assert new is not None
        event("reclaim: the old holder acks after another holder reclaimed")
        assert not self.ack_with(old, taken)
        with pytest.raises(StaleLeaseError):
            self.run(self.ob.extend(old))
        with pytest.raises(StaleLeaseError):
            self.run(self.ob.release(old, "turn_failed", delivery_ids=taken))
        if data.draw(st.booleans(), label="new holder acks"):
            assert self.ack_with(new, taken)

    @precondition(lambda self: self.leases)
    @rule(data=st.data(), permanent=st.sampled_from([False, False, True]),
          code=st.sampled_from(["model_unavailable", "turn_failed"]))
    def release(self, data: st.DataObject, permanent: bool, code: str) -> None:
        lease = self.lease(data)
        ids = self.pick(data, lease)
        chosen = [self.deliveries[i] for i in (ids or lease.delivery_ids)]
        now = self.now()
        if not all(d.held_by(lease, now) for d in chosen):
            event("release: stale token")
            with pytest.raises(StaleLeaseError):
                self.run(self.ob.release(lease, code, permanent=permanent, delivery_ids=ids))
            return
        states = self.run(self.ob.release(lease, code, permanent=permanent, delivery_ids=ids))
        expected = {}
        for d in chosen:
            dead = permanent or d.attempts >= CONFIG.max_attempts  # S8
            d.state = "dead_letter" if dead else "ready"
            d.deadline_us, d.failure_code = None, code
            d.claimable_at_us = now + SECOND_US  # backoff: claimable after 0.5 s to 1 s
            expected[d.delivery_id] = d.state
            event(f"release: to {d.state}")
        assert states == expected

    @rule(seconds=st.sampled_from([1, 2, 5, 6]))
    def advance(self, seconds: int) -> None:
        event("advance")
        self.clock.advance(timedelta(seconds=seconds))

    @rule()
    def sweep(self) -> None:
        now = self.now()
        spent = [
            d for d in self.live()
            if d.claimable_at_us <= now and d.attempts >= CONFIG.max_attempts
        ]
        report = self.run(self.ob.sweep())
        event(f"sweep: {'dead-lettered some' if spent else 'nothing spent'}")
        assert report.dead_lettered == len(spent)
        assert report.purged == 0
        for d in spent:
            d.failure_code = "lease_expired" if d.state == "leased" else "attempts_exhausted"
            d.state, d.deadline_us = "dead_letter", None

    @rule(reopen_store=st.booleans())
    def restart(self, reopen_store: bool) -> None:
        """A clean stop and a new boot: the old instance's leases are ready again (S9).

        The new boot opens the database afresh, or (cheaper) reuses the open store.
        """
        event("restart")
        old = self.ob
        self.run(old.instance.close())
        self.outbox = None
        if reopen_store:
            self.run(self.store.close())
            self.store = self.run(open_store(self.url))
        self.outbox = self.run(self.boot())
        assert self.ob.instance.instance_id != old.instance.instance_id
        with pytest.raises(InstanceNotRunningError):  # the old instance may no longer claim
            self.run(old.claim(CONVERSATIONS[0]))
        for d in self.deliveries.values():
            if d.state == "leased":
                d.state, d.deadline_us, d.claimable_at_us = "ready", None, self.now()
                d.failure_code = "instance_gone"

    # -- invariants ----------------------------------------------------------------------------

    @invariant()
    def states_match_the_model(self) -> None:
        rows = self.run(self.ob.delivery_states(sorted(self.deliveries)))
        actual = {
            r["delivery_id"]: (r["state"], r["attempts"], r["lease_token"],
                               r["lease_deadline_us"], r["failure_code"])
            for r in rows
        }
        expected = {
            d.delivery_id: (d.state, d.attempts, d.token,
                            d.deadline_us if d.state == "leased" else None, d.failure_code)
            for d in self.deliveries.values()
        }
        assert actual == expected

    @invariant()
    def stats_match_the_model(self) -> None:
        for conversation in (*CONVERSATIONS, None):
            stats = self.run(self.ob.stats(conversation))
            live = self.live(conversation)
            dead = [
                d for d in self.deliveries.values()
                if d.state == "dead_letter" and conversation in (None, d.conversation_id)
            ]
            oldest = min((d.published_at_us for d in live), default=None)
            assert stats.backlog == len(live)
            assert stats.ready == sum(d.state == "ready" for d in live)
            assert stats.leased == sum(d.state == "leased" for d in live)
            assert stats.retried == sum(
                (d.state == "ready" and d.attempts > 0) or d.attempts > 1 for d in live
            )
            assert stats.max_attempts == max((d.attempts for d in live), default=0)
            assert stats.dead_letters == len(dead)
            assert stats.oldest_age_us == (None if oldest is None else self.now() - oldest)


@pytest.fixture(params=["sqlite", "postgres"])
def fresh(request: pytest.FixtureRequest) -> Iterator[Fresh]:
    if request.param == "sqlite":
        yield Fresh()
        return
    admin: str = request.getfixturevalue("postgres_template")
    url = fresh_postgres_database(admin)
    try:
        yield Fresh(url)
    finally:
        drop_postgres_database(admin, url)


@pytest.mark.timeout(600)  # passing takes seconds; a failure's shrinking may take minutes
def test_s4_s5_s6_s7_s8_s9_s10_deliveries_follow_the_model(fresh: Fresh) -> None:
    machine = type("OutboxMachineRun", (OutboxMachine,), {"fresh": fresh})
    run_state_machine_as_test(
        machine,
        settings=settings(
            max_examples=fresh.max_examples,
            stateful_step_count=30,
            deadline=None,
            suppress_health_check=[HealthCheck.too_slow],
            database=None,
        ),
    )

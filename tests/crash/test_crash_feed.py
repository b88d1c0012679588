"""B1 across a crash: the answer a killed process was writing is gone with it. A watcher of
the restarted runtime never sees that text -- not as a delta, not as a message -- and sees the
run's end in the journal; a watcher that saw the pieces (another PostgreSQL process) is told
they were withdrawn when the run's end is known."""

from __future__ import annotations

from tests.conftest import Backend
from tests.feeding import Collector, Elsewhere, FeedEvent, assembled, committed, journal
from tests.scenarios.test_b1_feed_cluster import peer
from tidings import Profile, Runtime

OWNER = "alice"


def interrupted(events: list[FeedEvent]) -> bool:
    return any(e.type == "turn_status" and e.data.get("failure_code") == "interrupted"
               for e in events)


async def test_b1_a_crashed_writers_draft_is_never_shown_after_a_restart(
    backend: Backend,
) -> None:
    async with Runtime.open(backend.url, models=[Elsewhere()]) as rt:
        conv = (await rt.create_conversation(OWNER, Profile(model="scripted"))).conversation_id
        before = Collector(rt.watch(conv, owner=OWNER))
        await before.until(lambda events: journal(events), what="the history")
        async with peer(backend.url) as writer:
            await writer.send(post=conv, text="tell me a story")
            await writer.checkpoint("piece")
            if backend.name == "postgres":  # pieces cross processes there, not on SQLite
                await before.until(lambda events: assembled(events) == "Once ",
                                   what="the first piece, from the other process")
            await writer.kill()  # SIGKILL while the answer is half written

        # A new runtime on the database finds the writer gone and ends its run.
        async with Runtime.open(backend.url, models=[]) as restarted:
            after = Collector(restarted.watch(conv, owner=OWNER))
            events = await after.until(interrupted, what="the dead writer's run ended")
            assert [e for e in events if e.seq is None] == []  # no draft, no snapshot of it
            assert committed(events, "assistant") == []
            run = (await restarted.runs.list(conv))[0]
            assert (run.status.value, run.failure_code) == ("failed", "interrupted")
            assert "assistant" not in [m.role for m in await restarted.transcript(conv)]
            await after.stop()

        seen = await before.until(interrupted, what="the run's end, in the first process")
        withdrawn = [(e.data["run_id"], e.data["reason"]) for e in seen
                     if e.type == "message_discarded"]
        # The first watcher heard the pieces only on PostgreSQL; the run's end withdrew them.
        assert withdrawn == ([(run.run_id, "run_ended")] if backend.name == "postgres" else [])
        assert committed(seen, "assistant") == []
        await before.stop()

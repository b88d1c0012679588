"""Every invariant of the crash checker can fail (H6): for each one, a real database -- built by
the runtime with a scripted model, then broken on purpose with one SQL change -- makes exactly
that invariant fire; the database as the runtime left it passes them all.

The scene is built once per backend and module (a person's chat, a background task notified
and consumed, a task the model waited for, a child's reply relayed as mail, a turn-owned
child's reply consumed in its run, a signal acknowledged by a turn); each test gets its own
copy of it in the ``backend`` fixture's database and breaks that copy.
"""

from __future__ import annotations

import asyncio
import functools
import json
import re
import shutil
import sqlite3
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import psycopg
import pytest
from psycopg.rows import dict_row

from tests.conftest import Backend, drop_postgres_database, fresh_postgres_database
from tests.crash.invariants import INVARIANTS, NOTICE, Report, check, is_postgres
from tests.crash.torture_worker import pending
from tests.waiting import eventually
from tidings import Profile, Runtime
from tidings.models.base import DeltaCallback, ModelReply, ModelRequest, ToolCall

OWNER = "h6"
TOOLS = ("shell", "wait", "spawn")
SCENES = {
    "chat": "hello there",
    "notified": "bg quick",
    "waited": "bg wait",
    "parent": "spawn child",
    "owner": "spawn turn",
}
"""Each scene's conversation (by title) and the person's words that start it."""
SCENE_LIMIT_S = 60.0


class SceneModel:
    """Answers by the newest message; starts tools by the person's words."""

    name = "scene"

    async def complete(
        self, request: ModelRequest, *, on_delta: DeltaCallback | None = None
    ) -> ModelReply:
        newest = request.messages[-1]
        base = len(request.messages)

        def call(name: str, **arguments: Any) -> ModelReply:
            return ModelReply("", (ToolCall(f"call_{base}", name, arguments),))

        if newest.role == "tool":
            if newest.tool_name == "shell" and "bg wait" in request.messages[0].content:
                key = re.search(r"task (bg-[0-9a-f]+)", newest.content)
                assert key is not None, newest.content
                return call("wait", task_key=key.group(1), timeout_s=20)
            return ModelReply({"shell": "started", "wait": "It exited.",
                               "spawn": "delegated"}.get(newest.tool_name or "", "done"))
        if newest.role != "user":
            return ModelReply("ok")  # a turn woken by a signal
        if newest.meta.get("kind") == NOTICE:
            return ModelReply("noted")
        if newest.content.startswith("<task_result"):
            return ModelReply("got the report")
        words = newest.content
        if "bg quick" in words:
            return call("shell", command="echo quick", background=True)
        if "bg wait" in words:
            return call("shell", command="sleep 0.2; echo waited", background=True)
        if "spawn child" in words:
            return call("spawn", brief="count briefly")
        if "spawn turn" in words:
            return call("spawn", brief="count quickly", wait_s=30)
        if "count" in words:
            return ModelReply("one two three <b>done</b>")
        return ModelReply("ok")


async def _settled(rt: Runtime, conversations: list[str]) -> None:
    async def left() -> list[str]:
        """What is still pending; if anything, after nudging it on (a relay and a sweep)."""
        still = await pending(rt, conversations) + [
            f"{c}: signals" for c in conversations if (await rt.outbox.stats(c)).backlog
        ]
        if still:
            await rt.relay.relay_pending()
            await rt.coordinator.sweep()
        return still

    await eventually(left, lambda still: not still, what="the scene settled",
                     within_s=SCENE_LIMIT_S, poll_s=0.05)


async def build_scene(url: str) -> None:
    async with Runtime.open(url, models=[SceneModel()]) as rt:
        ids: dict[str, str] = {}
        for title, words in SCENES.items():
            ids[title] = (await rt.create_conversation(
                OWNER, Profile(model="scene", tools=TOOLS), title=title)).conversation_id
            await rt.post(ids[title], words)
        await _settled(rt, list(ids.values()))
        # A signal, claimed and acknowledged by the turn it wakes (S7).
        await rt.store.transact(functools.partial(
            rt.outbox.publish, conversation_id=ids["chat"], type="scene.observed",
            payload={"n": 1}, idempotency_key="scene-signal"))
        await _settled(rt, list(ids.values()))


# -- a database to break ----------------------------------------------------------------------


class Goldens:
    """One built scene per backend, copied into each test's database."""

    def __init__(self) -> None:
        self.dir = Path(tempfile.mkdtemp(prefix="tidings-h6-"))
        self.built: dict[str, str] = {}
        self.failed: dict[str, str] = {}
        self.admin: str | None = None
        self.scratch: str | None = None
        self.rows: dict[str, bytes] = {}
        """The PostgreSQL scene's rows, by table (COPY text)."""
        """The PostgreSQL database the scene is built in."""

    def golden(self, name: str, url: str) -> str:
        """The backend's built scene (built at the first call; a failed build fails every
        test of the backend at once, not after another minute each)."""
        if name in self.failed:
            pytest.fail(f"the scene could not be built: {self.failed[name]}")
        if name not in self.built:
            try:
                asyncio.run(build_scene(url))
            except Exception as exc:
                self.failed[name] = repr(exc)[:2000]
                raise
            self.built[name] = url
        return self.built[name]

    def copy_into(self, backend: Backend, request: pytest.FixtureRequest) -> None:
        if backend.name == "sqlite":
            golden = self.golden("sqlite", str(self.dir / "scene.db"))
            with sqlite3.connect(golden) as source, sqlite3.connect(backend.url) as target:
                source.backup(target)
            return
        self.admin = request.getfixturevalue("postgres_template")
        if self.scratch is None:
            self.scratch = fresh_postgres_database(self.admin)
        if not self.rows:
            golden = self.golden("postgres", self.scratch)
            with psycopg.connect(golden) as conn:
                tables = [r[0] for r in conn.execute(
                    "SELECT quote_ident(tablename) FROM pg_tables WHERE schemaname = 'public' "
                    "AND tablename != 'schema_migrations'")]
                for table in tables:
                    with conn.cursor().copy(f"COPY {table} TO STDOUT") as out:
                        self.rows[table] = b"".join(bytes(chunk) for chunk in out)
        # The test's database is freshly migrated and empty: the scene's rows go in as they
        # are (no triggers or foreign-key checks while they do).
        with psycopg.connect(backend.url) as conn:
            conn.execute("SET session_replication_role = replica")
            for table, data in self.rows.items():
                with conn.cursor().copy(f"COPY {table} FROM STDIN") as into:
                    into.write(data)

    def close(self) -> None:
        shutil.rmtree(self.dir, ignore_errors=True)
        if self.admin is not None and self.scratch is not None:
            drop_postgres_database(self.admin, self.scratch)


@pytest.fixture(scope="module")
def goldens() -> Iterator[Goldens]:
    made = Goldens()
    try:
        yield made
    finally:
        made.close()


@dataclass
class Scene:
    """A copy of the built scene: read it, break it, check it."""

    url: str

    def sql(self, statement: str, *params: Any) -> list[dict[str, Any]]:
        """One statement (``?`` placeholders), committed; its rows, if it returns any."""
        if is_postgres(self.url):
            with psycopg.connect(self.url, row_factory=dict_row, autocommit=True) as pg:
                found = pg.execute(statement.replace("?", "%s"), params)
                return [dict(r) for r in found.fetchall()] if found.description else []
        lite = sqlite3.connect(self.url)
        lite.row_factory = sqlite3.Row
        try:
            with lite:
                cur = lite.execute(statement, params)
                return [dict(r) for r in cur.fetchall()] if cur.description else []
        finally:
            lite.close()

    def one(self, statement: str, *params: Any) -> dict[str, Any]:
        rows = self.sql(statement, *params)
        assert len(rows) == 1, rows
        return rows[0]

    def conversation(self, title: str) -> str:
        return str(self.one("SELECT conversation_id FROM conversations WHERE title = ?",
                            title)["conversation_id"])

    def task(self, title: str) -> dict[str, Any]:
        return self.one("SELECT * FROM tasks WHERE conversation_id = ?",
                        self.conversation(title))

    def notice(self, title: str) -> dict[str, Any]:
        (row,) = [m for m in self.messages(title) if json.loads(m["meta"]).get("kind") == NOTICE]
        return row

    def messages(self, title: str) -> list[dict[str, Any]]:
        return self.sql("SELECT * FROM messages WHERE conversation_id = ? ORDER BY seq",
                        self.conversation(title))

    def append(self, title: str, role: str, content: str, meta: dict[str, Any], **more: Any
               ) -> int:
        """A message at the end of a transcript, written behind the runtime's back."""
        conv = self.conversation(title)
        seq = int(self.one("SELECT max(seq) AS s FROM messages WHERE conversation_id = ?",
                           conv)["s"]) + 1
        fields = {"conversation_id": conv, "seq": seq, "message_id": f"msg_h6_{seq}",
                  "role": role, "content": content, "meta": json.dumps(meta),
                  "created_at_us": int(time.time() * 1e6), **more}
        self.sql(f"INSERT INTO messages ({', '.join(fields)}) "
                 f"VALUES ({', '.join('?' for _ in fields)})", *fields.values())
        return seq

    def append_notice(self, title: str, content: str, meta: dict[str, Any], run_id: str) -> int:
        """A task notice written the way the journal writes one: a ``task_result`` input of the
        task, read by ``run_id`` as the message at the end of the transcript."""
        conv = self.conversation(title)
        seq = self.append(title, "user", content, meta, run_id=run_id,
                          input_id=f"in_h6_notice_{meta['task_key']}")
        position = int(self.one("SELECT max(queue_position) AS p FROM inputs "
                                "WHERE conversation_id = ?", conv)["p"]) + 1
        self.sql("INSERT INTO inputs (input_id, conversation_id, queue_position, origin, kernel, "
                 "author_kind, author_handle, author_display_name, run_public_id, task_key, "
                 "delivery_mode, content, meta, state, run_id, accepted_at_us, "
                 "materialized_at_us, message_seq) "
                 "VALUES (?, ?, ?, 'task_result', 1, 'human', ?, ?, ?, ?, 'queue', ?, ?, "
                 "'materialized', ?, 0, 0, ?)",
                 f"in_h6_notice_{meta['task_key']}", conv, position, OWNER, OWNER, run_id,
                 meta["task_key"], content, json.dumps(meta), run_id, seq)
        return seq

    def set_meta(self, conversation_id: str, seq: int, meta: dict[str, Any]) -> None:
        self.sql("UPDATE messages SET meta = ? WHERE conversation_id = ? AND seq = ?",
                 json.dumps(meta), conversation_id, seq)

    def child_mail(self) -> dict[str, Any]:
        return self.one("SELECT * FROM inputs WHERE origin = 'child'")

    def request(self, title: str) -> dict[str, Any]:
        return self.one("SELECT * FROM child_requests WHERE parent_conversation_id = ?",
                        self.conversation(title))

    def add_input(self, title: str, origin: str, task_key: str, meta: dict[str, Any]) -> None:
        """A queued kernel input, with the conversation's count of queued inputs kept true."""
        conv = self.conversation(title)
        position = int(self.one("SELECT max(queue_position) AS p FROM inputs "
                                "WHERE conversation_id = ?", conv)["p"]) + 1
        self.sql("INSERT INTO inputs (input_id, conversation_id, queue_position, origin, kernel, "
                 "author_kind, author_handle, author_display_name, task_key, delivery_mode, "
                 "content, meta, state, accepted_at_us) "
                 "VALUES (?, ?, ?, ?, 1, 'human', ?, ?, ?, 'queue', 'late mail', ?, 'queued', 0)",
                 f"in_h6_{position}", conv, position, origin, OWNER, OWNER, task_key,
                 json.dumps(meta))
        self.sql("UPDATE conversations SET queued_inputs = queued_inputs + 1 "
                 "WHERE conversation_id = ?", conv)

    def report(self) -> Report:
        return check(self.url)

    def fired(self) -> set[str]:
        return self.report().fired


@pytest.fixture
def scene(backend: Backend, goldens: Goldens, request: pytest.FixtureRequest) -> Scene:
    goldens.copy_into(backend, request)
    built = Scene(backend.url)
    assert built.report().violations == []
    return built


# -- a clean run passes -----------------------------------------------------------------------


def test_h6_the_runtimes_own_database_passes_every_invariant(scene: Scene) -> None:
    report = scene.report()
    assert report.violations == [], "\n".join(map(str, report.violations))
    counts = report.counts
    # The scene holds what every invariant reads: none of them passes for want of rows.
    assert counts["notifications"] == 1
    assert counts["reported_in_tool_result"] == 1
    assert counts["child_requests"] == 2
    assert counts["child_mail"] == 1
    assert counts["consumed_in_run"] == 1
    assert counts["tasks"] == 2
    assert counts["deliveries"] == 1
    assert scene.one("SELECT state, lease_owner FROM signal_deliveries")["state"] == \
        "acknowledged"


def test_h6_every_invariant_has_a_test_that_makes_it_fire() -> None:
    tests = {name for name in globals() if name.startswith("test_h6_")}
    untested = [kind for kind in INVARIANTS
                if not any(t.startswith(f"test_h6_{kind}_") for t in tests)]
    assert untested == []


# -- tasks and their notices ------------------------------------------------------------------


def test_h6_task_settled_fires_on_a_task_left_running(scene: Scene) -> None:
    scene.sql("UPDATE tasks SET state = 'running' WHERE task_id = ?",
              scene.task("waited")["task_id"])
    assert scene.fired() == {"task_settled"}


def test_h6_task_once_fires_on_a_second_notice(scene: Scene) -> None:
    note = scene.notice("notified")
    scene.append("notified", "user", note["content"], json.loads(note["meta"]),
                  run_id=note["run_id"])
    # A second notice is never a door's reading: the door accepts a task's notice once.
    assert scene.fired() == {"task_once", "task_result_input"}


def test_h6_task_notice_matches_fires_on_a_notice_of_another_end(scene: Scene) -> None:
    note = scene.notice("notified")
    scene.set_meta(note["conversation_id"], note["seq"],
                   {**json.loads(note["meta"]), "event_id": "evt_not_this_end"})
    assert scene.fired() == {"task_notice_matches"}


def test_h6_task_owed_fires_on_an_ended_task_never_notified(scene: Scene) -> None:
    task = scene.task("notified")
    scene.sql("INSERT INTO tasks (task_id, conversation_id, task_key, command, notify, lifetime, "
              "state, exit_code, event_id, committed, handed_off, instance_id, started_at_us) "
              "VALUES ('task_h6', ?, 'bg-h6', 'true', 'on_exit', 'conversation', 'exited', 0, "
              "'evt_h6', 1, 1, ?, 0)", task["conversation_id"], task["instance_id"])
    assert scene.fired() == {"task_owed"}


def test_h6_task_owed_fires_on_a_notice_never_consumed(scene: Scene) -> None:
    scene.sql("UPDATE tasks SET consumed = 0 WHERE task_id = ?", scene.task("notified")["task_id"])
    assert scene.fired() == {"task_owed"}


def test_h6_task_owed_fires_on_a_cancelled_task_notified(scene: Scene) -> None:
    scene.sql("UPDATE tasks SET cancelled = 1 WHERE task_id = ?",
              scene.task("notified")["task_id"])
    assert scene.fired() == {"task_owed"}


def test_h6_task_after_read_fires_on_a_notice_after_the_model_waited_for_the_task(
    scene: Scene,
) -> None:
    """T8: the model read the task's end in its wait's result; a notice then came anyway,
    written the way the journal writes one (the message, and ``delivered`` with it)."""
    task = scene.task("waited")
    assert task["reported_in_tool_result"] == 1
    seq = scene.append_notice("waited", "<task_notification>", {
        "kind": NOTICE, "event_id": task["event_id"], "task_key": task["task_key"],
        "state": task["state"]}, run_id=task["run_id"])
    scene.sql("UPDATE tasks SET delivered = 1, notification_seq = ? WHERE task_id = ?",
              seq, task["task_id"])
    report = scene.report()
    assert report.fired == {"task_after_read"}
    [violation] = report.violations
    assert violation.ids == (task["conversation_id"], task["task_key"])


def test_h6_task_reported_flag_fires_when_the_journal_missed_a_tool_result(
    scene: Scene,
) -> None:
    scene.sql("UPDATE tasks SET reported_in_tool_result = 0 WHERE task_id = ?",
              scene.task("waited")["task_id"])
    assert scene.fired() == {"task_reported_flag"}


def test_h6_task_reported_flag_fires_on_a_flag_no_tool_result_backs(scene: Scene) -> None:
    scene.sql("UPDATE tasks SET reported_in_tool_result = 1 WHERE task_id = ?",
              scene.task("notified")["task_id"])
    assert scene.fired() == {"task_reported_flag"}


def test_h6_task_after_call_fires_on_a_notice_before_its_calls_result(scene: Scene) -> None:
    note = scene.notice("notified")
    scene.sql("UPDATE messages SET seq = 0 WHERE conversation_id = ? AND seq = ?",
              note["conversation_id"], note["seq"])
    scene.sql("UPDATE tasks SET notification_seq = 0 WHERE task_id = ?",
              scene.task("notified")["task_id"])
    scene.sql("UPDATE inputs SET message_seq = 0 WHERE input_id = ?", note["input_id"])
    assert scene.fired() == {"task_after_call"}


def test_h6_task_delivered_fires_on_a_notice_not_marked_delivered(scene: Scene) -> None:
    scene.sql("UPDATE tasks SET delivered = 0 WHERE task_id = ?",
              scene.task("notified")["task_id"])
    assert scene.fired() == {"task_delivered"}


def test_h6_task_consumed_fires_when_the_step_that_saw_the_notice_failed(scene: Scene) -> None:
    note = scene.notice("notified")
    [answer] = [m for m in scene.messages("notified")
                if m["seq"] > note["seq"] and m["role"] == "assistant"]
    scene.sql("UPDATE runs SET status = 'failed' WHERE run_id = ?", answer["run_id"])
    assert scene.fired() == {"task_consumed"}


def test_h6_task_result_input_fires_on_two_task_result_inputs_for_one_task(
    scene: Scene,
) -> None:
    key = scene.task("notified")["task_key"]
    for _ in range(2):
        scene.add_input("notified", "task_result", key, {"kind": NOTICE, "task_key": key})
    assert scene.fired() == {"task_result_input"}


def test_h6_task_result_input_fires_on_a_notice_written_past_the_door(scene: Scene) -> None:
    note = scene.notice("notified")
    scene.sql("UPDATE messages SET input_id = NULL WHERE conversation_id = ? AND seq = ?",
              note["conversation_id"], note["seq"])
    scene.sql("DELETE FROM inputs WHERE input_id = ?", note["input_id"])
    assert scene.fired() == {"task_result_input"}


def test_h6_replayed_fires_on_a_call_that_started_a_second_task(scene: Scene) -> None:
    task = scene.task("notified")
    scene.sql("INSERT INTO tasks (task_id, conversation_id, task_key, run_id, call_id, command, "
              "notify, lifetime, state, exit_code, event_id, committed, handed_off, "
              "instance_id, started_at_us) "
              "VALUES ('task_h6', ?, 'bg-h6', ?, ?, 'echo quick', 'never', 'conversation', "
              "'exited', 0, 'evt_h6', 1, 1, ?, 0)",
              task["conversation_id"], task["run_id"], task["call_id"], task["instance_id"])
    assert scene.fired() == {"replayed"}


def test_h6_pairing_fires_on_a_message_inside_an_open_call(scene: Scene) -> None:
    scene.append("chat", "assistant", "", {}, tool_calls=json.dumps(
        [{"call_id": "call_h6", "name": "shell", "arguments": {}}]))
    scene.append("chat", "user", "steered into the call", {})
    report = scene.report()
    assert report.fired == {"pairing"}
    assert len(report.violations) == 2  # inside the open call; and never answered


# -- inputs -----------------------------------------------------------------------------------


def test_h6_input_once_fires_on_an_input_read_twice(scene: Scene) -> None:
    [first] = [m for m in scene.messages("chat") if m["input_id"] is not None]
    scene.append("chat", "user", first["content"], json.loads(first["meta"]),
                 input_id=first["input_id"], origin=first["origin"])
    assert scene.fired() == {"input_once"}


def test_h6_kernel_mail_fires_on_steered_kernel_mail(scene: Scene) -> None:
    scene.sql("UPDATE inputs SET delivery_mode = 'steer' WHERE input_id = ?",
              scene.child_mail()["input_id"])
    assert scene.fired() == {"kernel_mail"}


def test_h6_queue_counter_fires_on_a_miscounted_queue(scene: Scene) -> None:
    scene.sql("UPDATE conversations SET queued_inputs = queued_inputs + 1 "
              "WHERE conversation_id = ?", scene.conversation("chat"))
    assert scene.fired() == {"queue_counter"}


# -- children ---------------------------------------------------------------------------------


def test_h6_child_owed_fires_on_a_request_left_open(scene: Scene) -> None:
    scene.sql("UPDATE child_requests SET state = 'open' WHERE request_id = ?",
              scene.request("parent")["request_id"])
    assert scene.fired() == {"child_owed"}


def test_h6_child_cancelled_fires_on_a_cancelled_request_that_was_mailed(scene: Scene) -> None:
    scene.sql("UPDATE child_requests SET state = 'cancelled' WHERE request_id = ?",
              scene.request("parent")["request_id"])
    assert scene.fired() == {"child_cancelled"}


def test_h6_child_mail_once_fires_on_mail_for_a_reply_consumed_in_its_run(
    scene: Scene,
) -> None:
    request = scene.request("owner")
    assert request["relayed_at_us"] is not None
    scene.add_input("owner", "child", request["task_key"],
                    {"relayed_request": request["request_id"], "status": "completed"})
    assert scene.fired() == {"child_mail_once"}


def test_h6_child_mail_read_fires_on_a_relayed_reply_whose_mail_was_cancelled(
    scene: Scene,
) -> None:
    """Marked relayed, but its mail was withdrawn before the parent read it: the parent's
    model never saw the reply. (The old checker trusted ``relayed_at`` and passed this.)"""
    mail = scene.child_mail()
    scene.sql("UPDATE inputs SET state = 'cancelled', run_id = NULL, message_seq = NULL "
              "WHERE input_id = ?", mail["input_id"])
    scene.sql("DELETE FROM messages WHERE input_id = ?", mail["input_id"])
    assert scene.request("parent")["relayed_at_us"] is not None
    assert scene.fired() == {"child_mail_read"}


def test_h6_child_mail_read_fires_when_the_reply_is_not_in_the_parents_transcript(
    scene: Scene,
) -> None:
    mail = scene.child_mail()
    scene.sql("UPDATE messages SET content = ? WHERE input_id = ?",
              mail["content"].replace("one two three", "something else"), mail["input_id"])
    assert scene.fired() == {"child_mail_read"}


def test_h6_child_in_run_fires_on_a_reply_consumed_in_its_run_but_never_shown(
    scene: Scene,
) -> None:
    [shown] = [m for m in scene.messages("owner")
               if json.loads(m["meta"]).get("consume_child_request")]
    meta = json.loads(shown["meta"])
    del meta["consume_child_request"]
    scene.set_meta(shown["conversation_id"], shown["seq"], meta)
    assert scene.fired() == {"child_in_run"}


# -- runs and the outbox ----------------------------------------------------------------------


def test_h6_overlap_fires_on_two_turns_at_once(scene: Scene) -> None:
    first, second = scene.sql("SELECT run_id, started_at_us FROM runs "
                              "WHERE conversation_id = ? ORDER BY started_at_us",
                              scene.conversation("notified"))
    scene.sql("UPDATE runs SET ended_at_us = ? WHERE run_id = ?",
              second["started_at_us"] + 1, first["run_id"])
    assert scene.fired() == {"overlap"}


def test_h6_run_reply_fires_on_a_completed_run_with_no_reply(scene: Scene) -> None:
    scene.sql("INSERT INTO runs (run_id, conversation_id, trigger, status, created_at_us, "
              "started_at_us, ended_at_us) VALUES ('run_h6', ?, 'person', 'completed', ?, ?, ?)",
              scene.conversation("chat"), *[int(time.time() * 1e6) + 10**9] * 3)
    assert scene.fired() == {"run_reply"}


def test_h6_delivery_ack_fires_on_a_signal_acknowledged_by_a_failed_turn(scene: Scene) -> None:
    owner = scene.one("SELECT lease_owner FROM signal_deliveries")["lease_owner"]
    scene.sql("UPDATE runs SET status = 'failed' WHERE run_id = ?", owner)
    assert scene.fired() == {"delivery_ack"}


def test_h6_dead_letter_fires_on_a_dead_letter_without_a_code(scene: Scene) -> None:
    delivery = scene.one("SELECT delivery_id, conversation_id FROM signal_deliveries")
    scene.sql("UPDATE signal_deliveries SET state = 'dead_letter', failure_code = NULL "
              "WHERE delivery_id = ?", delivery["delivery_id"])
    scene.sql("UPDATE signal_queues SET dead_letters = dead_letters + 1 "
              "WHERE conversation_id = ?", delivery["conversation_id"])
    assert scene.fired() == {"dead_letter"}


def test_h6_backlog_counter_fires_on_a_miscounted_backlog(scene: Scene) -> None:
    scene.sql("UPDATE signal_queues SET backlog = backlog + 1")
    assert scene.fired() == {"backlog_counter"}


def test_h6_operation_fires_on_an_operation_left_accepted(scene: Scene) -> None:
    scene.sql("INSERT INTO operations (operation_id, kind, owner, origin_instance, "
              "idempotency_key, state, accepted_at_us) "
              "SELECT 'op_h6', 'restart', ?, instance_id, 'h6', 'accepted', 0 "
              "FROM instances LIMIT 1", OWNER)
    assert scene.fired() == {"operation"}


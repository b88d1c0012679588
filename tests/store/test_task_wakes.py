"""L3: which tasks' notifications may wake their conversation, as a task's row says it.

The unit that delivers a notification decides from the row it read whether a direct turn's
notification waits (then it asks the database nothing more); the rule is the store's own, the
one the database applies when it is asked.
"""

from __future__ import annotations

import pytest

from tidings.clock import SystemClock
from tidings.conversations.catalog import Conversations
from tidings.store import Store, Tx
from tidings.tasks.journal import task_from_row
from tidings.types import Profile


@pytest.mark.parametrize(("trigger", "direct"), [
    (None, True),  # started outside any run (by the host)
    ("person", True),
    ("agent", True),
    ("mail", True),
    ("wake", False),  # continuation-started work wakes nothing by itself
    ("goal", False),
])
async def test_l3_a_tasks_row_says_whether_its_notification_may_wake(
    store: Store, trigger: str | None, direct: bool
) -> None:
    conv = (await Conversations(store, SystemClock()).create("alice", Profile(model="m"))
            ).conversation_id

    def unit(tx: Tx) -> tuple[bool, bool, bool]:
        run_id = None
        if trigger is not None:
            run_id = "run_l3"
            tx.execute("insert_run", run_id=run_id, conversation_id=conv, trigger=trigger,
                       status="completed", instance_id=None, now_us=1)
        tx.execute("insert_task", task_id="task_l3", conversation_id=conv, task_key="t1",
                   run_id=run_id, call_id=None, command="sleep 1", notify="on_exit",
                   lifetime="conversation", handed_off=0, instance_id="inst_l3", now_us=1)
        tx.execute("set_task_flags", task_id="task_l3", committed=1, handed_off=1,
                   delivered=1, consumed=0, cancelled=0, reported_in_tool_result=0,
                   continuation_error=None, notification_seq=None)
        row = tx.one("get_task", conversation_id=conv, task_key="t1")
        asked = tx.one("direct_notifications", conversation_id=conv)
        assert row is not None
        assert asked is not None
        return task_from_row(row).direct, bool(asked["direct"]), task_from_row(
            {k: v for k, v in row.items() if k != "direct"}).direct

    from_row, from_database, read_without_it = await store.transact(unit, route=conv)
    assert from_row is direct
    assert from_database is direct  # the same rule, asked of the database
    assert read_without_it is False  # not known: the database is asked

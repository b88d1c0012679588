"""S2, L3: the named queries -- written once in ``common/``, a dialect overriding only what differs.

A dialect's block replaces the common block of the same name; an override that repeats the
common text is refused at load, so duplication cannot creep back. Both dialects resolve the same
names (``test_schema.py``), and the passive-signal rule the SQL applies is the policy's own.
"""

from __future__ import annotations

import pytest

from tidings import ManualClock, Outbox, Published, Tx
from tidings.store import Row
from tidings.store import queries as loader
from tidings.store.queries import load_queries, wakes_sql
from tidings.support.policy import PASSIVE_SIGNAL_PREFIXES, wakes

DIALECTS = ("sqlite", "postgres")


def _files(monkeypatch: pytest.MonkeyPatch, texts: dict[str, str]) -> None:
    """Serve ``<folder>/queries.sql`` from ``texts`` instead of the package's files."""

    def sql_text(folder: str, filename: str) -> str:
        assert filename == "queries.sql"
        return texts[folder]

    monkeypatch.setattr(loader, "sql_text", sql_text)


COMMON = """
-- get_thing --
SELECT * FROM things WHERE id = :id;

-- lock_thing --
SELECT * FROM things WHERE id = :id;
"""


def test_s2_a_dialect_block_replaces_the_common_one(monkeypatch: pytest.MonkeyPatch) -> None:
    _files(monkeypatch, {
        "common": COMMON,
        "postgres": "-- lock_thing --\nSELECT * FROM things WHERE id = :id FOR UPDATE;\n",
    })
    queries = load_queries("postgres")
    assert queries["get_thing"].statements == ("SELECT * FROM things WHERE id = :id",)
    assert queries["lock_thing"].statements == ("SELECT * FROM things WHERE id = :id FOR UPDATE",)


def test_s2_an_override_repeating_the_common_text_is_refused(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # The same statement, only commented and laid out differently: still a copy.
    _files(monkeypatch, {
        "common": COMMON,
        "sqlite": "-- get_thing --\n-- why not\nSELECT *\n  FROM things\n WHERE id = :id;\n",
    })
    with pytest.raises(ValueError, match="overrides 'get_thing' with the text of common"):
        load_queries("sqlite")


def test_s2_a_name_defined_twice_in_one_file_is_refused(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    _files(monkeypatch, {"common": COMMON + "\n-- get_thing --\nSELECT 1;\n", "sqlite": ""})
    with pytest.raises(ValueError, match=r"defined twice in common/queries\.sql"):
        load_queries("sqlite")


def test_s2_a_fragment_is_spliced_where_a_block_names_it(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    _files(monkeypatch, {
        "common": "-- {thing_columns} --\nid, name\n\n-- get_thing --\n"
                  "SELECT {thing_columns} FROM things WHERE id = :id;\n",
        "sqlite": "",
    })
    assert load_queries("sqlite")["get_thing"].statements == (
        "SELECT id, name FROM things WHERE id = :id",
    )
    assert "{thing_columns}" not in load_queries("sqlite")


def test_s2_an_unknown_fragment_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    _files(monkeypatch, {"common": "-- get_thing --\nSELECT {nothing} FROM things;\n",
                         "sqlite": ""})
    with pytest.raises(ValueError, match="no SQL fragment"):
        load_queries("sqlite")


def test_s2_most_queries_are_written_once_for_both_dialects() -> None:
    """Loading refuses an override that copies common; what no dialect overrides (nor splices a
    dialect's fragment into) is the same text on both."""
    common = loader.read_blocks("common")
    overridden = set(loader.read_blocks("sqlite")) | set(loader.read_blocks("postgres"))
    hooks = {name for name in overridden if name.startswith("{")}
    sqlite, postgres = load_queries("sqlite"), load_queries("postgres")
    shared = set(sqlite) - overridden
    assert len(shared) > 3 * len(overridden), sorted(overridden)
    assert shared <= set(common)
    for name in shared:
        if not any(hook in statement for hook in hooks for statement in common[name]):
            assert sqlite[name] == postgres[name], name


# -- the passive-signal rule has one source ------------------------------------------------------


def test_l3_wakes_fragment_is_written_from_the_policy_prefixes() -> None:
    fragment = wakes_sql("e.type")
    for prefix in PASSIVE_SIGNAL_PREFIXES:
        assert f"e.type NOT LIKE '{prefix}%'" in fragment
    for dialect in DIALECTS:
        (statement,) = load_queries(dialect)["has_ready_signals"].statements
        assert "{" not in statement
        assert fragment in statement


def test_l3_a_prefix_that_cannot_be_a_like_pattern_is_refused(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(loader, "PASSIVE_SIGNAL_PREFIXES", ("job_",))
    with pytest.raises(ValueError, match="cannot be written as SQL"):
        wakes_sql("e.type")


SIGNAL_TYPES = (
    "task.exited", "restart_completed", "config.changed", "approval.decided", "job.progress",
    "jobs.nightly", "config", "approvals",
)


async def test_l3_the_store_and_the_policy_agree_on_which_signals_wake(
    outbox: Outbox, clock: ManualClock
) -> None:
    """Each type alone in its own conversation: ready exactly when ``policy.wakes`` says so."""
    assert any(wakes(t) for t in SIGNAL_TYPES)
    assert not all(wakes(t) for t in SIGNAL_TYPES)
    for number, signal_type in enumerate(SIGNAL_TYPES):
        conversation = f"conv-{number}"

        def publish(tx: Tx, c: str = conversation, t: str = signal_type) -> Published:
            return outbox.publish(tx, c, t, {"n": 1})

        def ready(tx: Tx, c: str = conversation) -> Row | None:
            return tx.one("has_ready_signals", conversation_id=c, now_us=clock.now_us(),
                          max_attempts=outbox.config.max_attempts)

        await outbox.store.transact(publish)
        row = await outbox.store.read(ready)
        assert row is not None
        assert bool(row["ready"]) is wakes(signal_type), signal_type

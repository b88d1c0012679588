"""B2: the marks a wait compares to know that no unit of this process changed a conversation
since its input was read (the read it can then skip)."""

from __future__ import annotations

from tidings.store.base import Wakeups


def test_b2_each_change_gives_a_new_greater_mark_and_other_conversations_keep_theirs() -> None:
    wakeups = Wakeups()
    assert wakeups.mark("a") is None  # never changed here: unknown, so a wait looks

    wakeups.stamp(["a"])
    first = wakeups.mark("a")
    wakeups.stamp(["b"])
    assert wakeups.mark("a") == first  # another conversation's change is not a's
    wakeups.stamp(["a"])
    second = wakeups.mark("a")

    assert first is not None
    assert second is not None
    assert second > first


def test_b2_a_forgotten_conversation_is_unknown_and_never_gets_an_old_mark_back() -> None:
    wakeups = Wakeups()
    wakeups.MARKS = 3
    wakeups.stamp(["a"])
    old = wakeups.mark("a")
    wakeups.stamp(["b", "c", "d"])  # the oldest (a) is forgotten

    assert wakeups.mark("a") is None
    assert [wakeups.mark(c) is not None for c in "bcd"] == [True, True, True]
    wakeups.stamp(["a"])
    assert wakeups.mark("a") != old  # a mark taken before is never equal again

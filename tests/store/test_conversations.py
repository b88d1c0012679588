"""Conversations: create, read, list, archive, tombstone, profiles and goals -- owner-scoped on
both backends, with a foreign or deleted conversation answered exactly like an unknown one."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest
import pytest_asyncio

from tests.conftest import Backend
from tidings.clock import ManualClock
from tidings.conversations.catalog import Conversations
from tidings.errors import InvalidInputError, UnknownConversationError
from tidings.store import Store, open_store
from tidings.types import ConversationStatus, GoalStatus, Profile

PROFILE = Profile(model="m", fallbacks=("n",), tools=("shell",), approval_mode="writes")


@pytest_asyncio.fixture
async def conversations(backend: Backend, clock: ManualClock) -> AsyncIterator[Conversations]:
    store: Store = await open_store(backend.url)
    try:
        yield Conversations(store, clock)
    finally:
        await store.close()


async def test_c2_create_read_and_list_by_owner(conversations: Conversations) -> None:
    mine = [await conversations.create("alice", PROFILE, title=f"t{i}") for i in range(3)]
    theirs = await conversations.create("bob", PROFILE)
    got = await conversations.get(mine[0].conversation_id, owner="alice")
    assert got.profile == PROFILE
    assert got.status is ConversationStatus.ACTIVE
    listed = await conversations.list_owned("alice")
    assert [c.conversation_id for c in listed] == sorted(c.conversation_id for c in mine)
    page = await conversations.list_owned("alice", after=listed[0].conversation_id, limit=1)
    assert [c.conversation_id for c in page] == [listed[1].conversation_id]
    assert [c.conversation_id for c in await conversations.list_owned("bob")] == [
        theirs.conversation_id]


async def test_c3_foreign_and_tombstoned_read_like_unknown(
    conversations: Conversations,
) -> None:
    conv = (await conversations.create("alice", PROFILE)).conversation_id
    with pytest.raises(UnknownConversationError) as foreign:
        await conversations.get(conv, owner="mallory")
    with pytest.raises(UnknownConversationError) as unknown:
        await conversations.get("conv_nope", owner="mallory")
    assert str(foreign.value).replace(conv, "X") == str(unknown.value).replace("conv_nope", "X")
    archived = await conversations.archive(conv, owner="alice")
    assert archived.status is ConversationStatus.ARCHIVED
    await conversations.tombstone(conv, owner="alice")
    with pytest.raises(UnknownConversationError):
        await conversations.get(conv, owner="alice")
    assert await conversations.list_owned("alice") == []
    with pytest.raises(UnknownConversationError):
        await conversations.archive(conv, owner="alice")


async def test_c3_goal_and_profile_changes_are_journalled(
    conversations: Conversations,
) -> None:
    conv = (await conversations.create("alice", PROFILE)).conversation_id
    await conversations.set_goal(conv, "active", "ship it")
    paused = await conversations.set_goal(conv, GoalStatus.PAUSED)
    assert (paused.goal_status, paused.goal_text) == (GoalStatus.PAUSED, "ship it")
    changed = await conversations.set_profile(conv, Profile(model="other"))
    assert changed.profile.model == "other"
    types = [e.type for e in await conversations.events(conv)]
    assert types == ["conversation_created", "goal_status", "goal_status", "profile_changed"]
    with pytest.raises(InvalidInputError):
        await conversations.set_goal(conv, "finished-ish")
    with pytest.raises(InvalidInputError):
        await conversations.create("alice", Profile(model="m", approval_mode="sometimes"))

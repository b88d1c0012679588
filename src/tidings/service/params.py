"""What a request's path, query and headers may hold, checked before a route runs.

Every value a client puts in a URL or a header is bounded here, and the bounds are published in
the OpenAPI schema: positions and times are integers in ``[0, 2**63 - 1]`` (what both databases
hold), ids and cursors are at most 200 characters with no control characters. A value outside
them is a 422 ``invalid_input`` -- the same on both backends, before anything reads the store.

Percent-encoded bytes that are not UTF-8 never reach these checks: the server would quietly
replace them with U+FFFD, so :class:`tidings.service.app.StrictTarget` refuses them first.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from fastapi import Header, Path, Query

from tidings.support.policy import MAX_ID_LENGTH, MAX_INT64

NO_CONTROL = r"^[^\x00-\x1f\x7f]*$"
"""No control characters (NUL, line breaks, ...): what an id or a cursor may never hold."""

SEQUENCE_DIGITS = r"^[ \t]*[0-9]{0,19}[ \t]*$"
"""A ``Last-Event-ID``: a journal sequence in ASCII digits, or blank."""


def _id(description: str) -> Any:
    return Path(min_length=1, max_length=MAX_ID_LENGTH, pattern=NO_CONTROL,
                description=description)


ConversationId = Annotated[str, _id("A conversation id.")]
RunId = Annotated[str, _id("A run id.")]
TaskKey = Annotated[str, _id("A task key.")]
ResultId = Annotated[str, _id("A result id.")]
ApprovalId = Annotated[str, _id("An approval id.")]
QuestionId = Annotated[str, _id("A question id.")]

DeliveryId = Annotated[int, Path(ge=1, le=MAX_INT64, description="A delivery id.")]

Limit = Annotated[int, Query(ge=1, le=1000, description="At most this many items.")]
Cursor = Annotated[str, Query(max_length=MAX_ID_LENGTH, pattern=NO_CONTROL,
                              description="The last id of the previous page; empty: from the "
                                          "start.")]
AfterSeq = Annotated[int, Query(ge=0, le=MAX_INT64,
                                description="Only what comes after this journal sequence.")]
OptionalAfterSeq = Annotated[int | None, Query(
    ge=0, le=MAX_INT64, description="Only what comes after this journal sequence.")]
BeforeUs = Annotated[int | None, Query(
    ge=0, le=MAX_INT64, description="Only what started before this time (microseconds).")]
Offset = Annotated[int, Query(ge=0, le=MAX_INT64, description="The first byte of the page.")]
LimitBytes = Annotated[int | None, Query(ge=4, le=1024 * 1024,
                                         description="At most this many bytes of text.")]
StatusFilter = Annotated[str, Query(alias="status", max_length=16, pattern=r"^[a-z_]*$",
                                    description="Only those in this status; empty: all.")]
Order = Annotated[Literal["oldest", "newest"], Query(
    description="oldest: by id, the oldest first (the default); newest: the newest first.")]
MAX_WAIT_S = 300
"""The longest a waiting post (``?wait=``) holds its request open, in seconds."""

WaitSeconds = Annotated[float | None, Query(
    gt=0, le=MAX_WAIT_S,
    description="Wait up to this many seconds (more than 0, at most 300) for the input's "
                "answer: the run that read it ended or awaits approval. Answered 200 with the "
                "answer; without it the post answers 202 with the input at once.")]
LastEventId = Annotated[str | None, Header(
    alias="Last-Event-ID", max_length=64, pattern=SEQUENCE_DIGITS,
    description="The last journal sequence a reconnecting client saw.")]

__all__ = (
    "MAX_WAIT_S",
    "NO_CONTROL",
    "AfterSeq",
    "ApprovalId",
    "BeforeUs",
    "ConversationId",
    "Cursor",
    "DeliveryId",
    "LastEventId",
    "Limit",
    "LimitBytes",
    "Offset",
    "OptionalAfterSeq",
    "Order",
    "ResultId",
    "RunId",
    "StatusFilter",
    "TaskKey",
    "WaitSeconds",
)

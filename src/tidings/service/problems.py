"""Errors as RFC 9457 problem documents (``application/problem+json``).

Every refusal the service sends has the same shape: ``type``, ``title``, ``status``,
``detail`` and a stable ``code``. A :class:`~tidings.errors.TidingsError` keeps its own
``code``; :data:`STATUS` gives each subclass its HTTP status explicitly (a test checks that no
subclass is missing). Anything else that escapes a route is a 500 that names nothing internal.

The choices worth stating:

- a full backlog or input queue is **429** (back off and retry later: nothing about the request
  itself is wrong, and nothing was written);
- ``commit_outcome_unknown`` is **503**, never a success: the write may or may not have landed,
  and the caller must read before it retries without an idempotency key;
- every unknown -- and every foreign -- id is the same **404**.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from pydantic import BaseModel, Field

from tidings.errors import (
    ApprovalDecidedError,
    BacklogFullError,
    CommitOutcomeUnknownError,
    CompactionRefusedError,
    ConfigError,
    ConnectionLostError,
    ConversationClosedError,
    CorruptDatabaseError,
    DatabaseBusyError,
    DatabasePathError,
    DiskFullError,
    DuplicateTaskKeyError,
    InputQueueFullError,
    InstanceNotRunningError,
    IntegrityViolationError,
    InvalidInputError,
    MasterKeyError,
    ModelError,
    ModelSampleError,
    NotDeadLetterError,
    OperationSettledError,
    OriginNotAllowedError,
    PairingViolationError,
    PayloadTooLargeError,
    PrivateTargetError,
    QuestionDecidedError,
    ReadOnlyDatabaseError,
    ResultCorruptError,
    RuntimeLockedError,
    SchemaError,
    SlotLostError,
    StaleLeaseError,
    StoreError,
    SupervisorClosedError,
    TidingsError,
    UnknownApprovalError,
    UnknownConversationError,
    UnknownDeadLetterError,
    UnknownInputError,
    UnknownModelOrToolError,
    UnknownOperationError,
    UnknownProfileError,
    UnknownPushConfigError,
    UnknownQuestionError,
    UnknownResultError,
    UnknownRunError,
    UnknownTaskError,
)
from tidings.service.fields import readable

if TYPE_CHECKING:  # the web stack is the service's: a client reading problems does without it
    from fastapi import FastAPI, Request
    from fastapi.exceptions import RequestValidationError
    from fastapi.responses import JSONResponse
    from starlette.exceptions import HTTPException as StarletteHTTPException

log = logging.getLogger("tidings.service")

PROBLEM_MEDIA_TYPE = "application/problem+json"

STATUS: Mapping[type[TidingsError], int] = {
    TidingsError: 500,
    # bad input: nothing was written
    InvalidInputError: 422,
    OriginNotAllowedError: 422,
    UnknownProfileError: 422,
    ConfigError: 500,
    UnknownModelOrToolError: 422,  # the profile names what this runtime does not have
    PayloadTooLargeError: 413,
    # admission bounds: back off and retry
    BacklogFullError: 429,
    InputQueueFullError: 429,
    # unknown (and foreign) ids
    UnknownConversationError: 404,
    UnknownRunError: 404,
    UnknownTaskError: 404,
    UnknownResultError: 404,
    UnknownOperationError: 404,
    UnknownApprovalError: 404,
    UnknownQuestionError: 404,
    UnknownDeadLetterError: 404,
    UnknownInputError: 404,
    UnknownPushConfigError: 404,
    PrivateTargetError: 422,  # a webhook URL the operator does not allow
    # the state of the thing refuses the request
    ConversationClosedError: 409,
    CompactionRefusedError: 409,
    StaleLeaseError: 409,
    OperationSettledError: 409,
    ApprovalDecidedError: 409,
    QuestionDecidedError: 409,
    NotDeadLetterError: 409,
    PairingViolationError: 409,
    SlotLostError: 409,
    DuplicateTaskKeyError: 409,
    IntegrityViolationError: 409,
    # the store, or this instance, cannot serve now
    StoreError: 503,
    DatabaseBusyError: 503,
    DatabasePathError: 503,  # raised when the store opens: a service never sees it
    DiskFullError: 503,
    ConnectionLostError: 503,
    CommitOutcomeUnknownError: 503,
    ReadOnlyDatabaseError: 503,
    CorruptDatabaseError: 503,
    SchemaError: 503,
    InstanceNotRunningError: 503,
    SupervisorClosedError: 503,
    RuntimeLockedError: 503,  # locked boot (L1): nothing is served until it is unlocked
    MasterKeyError: 503,  # results cannot be sealed or opened without the master key
    # faults that retrying will not mend
    ResultCorruptError: 500,
    ModelError: 502,
    ModelSampleError: 502,  # a tool's sampling, answered in the call: never a route's
}
"""The HTTP status of every :class:`TidingsError` subclass, listed one by one."""

_BY_CLASS: dict[type, int] = dict(STATUS)

RETRY_AFTER_S: Mapping[int, int] = {429: 1, 503: 1}

# Problems the service raises itself (not from the runtime): code -> title.
TITLES: Mapping[str, str] = {
    "unauthorized": "A valid bearer token is required.",
    "forbidden": "This token may not use this route.",
    "not_found": "No such route.",
    "method_not_allowed": "The route does not take this method.",
    "malformed_body": "The request body is not well-formed JSON in UTF-8; nothing was written.",
    "payload_too_large": (PayloadTooLargeError.__doc__ or "").strip(),
    "invalid_input": (InvalidInputError.__doc__ or "").strip(),
    "origin_not_allowed": (OriginNotAllowedError.__doc__ or "").strip(),
    "internal_error": "The service failed; nothing about the failure is disclosed.",
    "http_error": "The request was refused.",
}


class FieldError(BaseModel):
    """One validation failure: where (``loc``), what kind (``type``), in words (``msg``)."""

    loc: list[str | int]
    type: str
    msg: str


class Problem(BaseModel):
    """An RFC 9457 problem document."""

    type: str = Field(description="A URI naming the problem type: urn:tidings:problem:<code>.")
    title: str = Field(description="A short summary of the problem type; stable per code.")
    status: int = Field(description="The HTTP status code.")
    detail: str = Field(description="This occurrence, in words.")
    code: str = Field(description="A stable machine-readable code (a TidingsError's code).")
    errors: list[FieldError] | None = Field(
        default=None, description="For a request that failed validation: what failed, where."
    )


class HTTPProblem(Exception):
    """A refusal made by the service itself (authentication, routing, body limits)."""

    def __init__(
        self,
        status: int,
        code: str,
        detail: str,
        *,
        title: str | None = None,
        headers: Mapping[str, str] | None = None,
    ) -> None:
        super().__init__(detail)
        self.status = status
        self.code = code
        self.detail = detail
        self.title = title
        self.headers = dict(headers or {})


def status_of(exc: TidingsError) -> int:
    """The status of the nearest listed class (every class is listed; see :data:`STATUS`)."""
    for cls in type(exc).__mro__:
        status = _BY_CLASS.get(cls)
        if status is not None:
            return status
    return 500


def title_of(exc: TidingsError) -> str:
    """The class's docstring (its default message), first paragraph: stable per code."""
    paragraph = (type(exc).__doc__ or "").strip().split("\n\n", 1)[0]
    return " ".join(paragraph.split()) or exc.code


def problem(
    status: int,
    code: str,
    detail: str,
    *,
    title: str | None = None,
    errors: Sequence[FieldError] | None = None,
) -> Problem:
    return Problem(
        type=f"urn:tidings:problem:{code}",
        title=title or TITLES.get(code, TITLES["http_error"]),
        status=status,
        detail=detail,
        code=code,
        errors=list(errors) if errors is not None else None,
    )


def problem_response(body: Problem, headers: Mapping[str, str] | None = None) -> JSONResponse:
    from fastapi.responses import JSONResponse

    merged = dict(headers or {})
    # A transient refusal says when to come back -- except an unknown outcome, which must be
    # read (did it land?) before anything is retried.
    if body.status in RETRY_AFTER_S and body.code != CommitOutcomeUnknownError.code:
        merged.setdefault("Retry-After", str(RETRY_AFTER_S[body.status]))
    return JSONResponse(
        body.model_dump(mode="json", exclude_none=True),
        status_code=body.status,
        media_type=PROBLEM_MEDIA_TYPE,
        headers=merged,
    )


def from_error(exc: TidingsError) -> Problem:
    return problem(status_of(exc), exc.code, exc.message, title=title_of(exc))


def internal_error() -> Problem:
    return problem(500, "internal_error", "The service could not complete the request.")


def _field_errors(raw: Sequence[Any]) -> list[FieldError]:
    # The rejected input values are left out on purpose: they may hold secrets.
    return [
        FieldError(
            loc=[p if isinstance(p, int) else str(p) for p in e.get("loc", ())],
            type=str(e.get("type", "invalid")),
            msg=str(e.get("msg", "")),
        )
        for e in raw
    ]


KERNEL_FIELDS = frozenset(
    {"origin", "authored_by", "sender_conversation_id", "sender_conversation_public_id",
     "run_public_id", "task_key"}
)
"""Input fields only the kernel stamps: an HTTP caller who sends one is refused by name."""


def from_validation(exc: RequestValidationError) -> Problem:
    raw = list(exc.errors())
    errors = _field_errors(raw)
    if any(e.type == "json_invalid" for e in errors):
        return problem(400, "malformed_body", "The request body is not valid JSON.",
                       errors=errors)
    spoofed = sorted(
        str(e.loc[-1]) for e in errors
        if e.type == "extra_forbidden" and e.loc and e.loc[-1] in KERNEL_FIELDS
    )
    if spoofed:
        return problem(422, "origin_not_allowed",
                       f"{', '.join(spoofed)}: stamped by the kernel; callers may not supply it",
                       errors=errors)
    where = "; ".join(readable(raw, exc.body)[:5])
    return problem(422, "invalid_input", where or "the request is invalid", errors=errors)


def from_http(exc: StarletteHTTPException) -> Problem:
    if exc.status_code == 404:
        return problem(404, "not_found", "No such route.")
    if exc.status_code == 405:
        return problem(405, "method_not_allowed", "The route does not take this method.")
    if exc.status_code == 400:
        return problem(400, "malformed_body", "The request body could not be read as JSON.")
    return problem(exc.status_code, "http_error", str(exc.detail))


def error_response(method: str, path: str, exc: TidingsError) -> JSONResponse:
    """The problem document a library error makes (logged when it is the service's fault)."""
    body = from_error(exc)
    if body.status >= 500:
        log.warning("%s %s: %s (%s)", method, path, exc.code, exc.message)
    return problem_response(body)


def install(app: FastAPI) -> None:
    """Answer every refusal of ``app`` with a problem document."""
    from fastapi.exceptions import RequestValidationError
    from starlette.exceptions import HTTPException as StarletteHTTPException

    async def on_tidings(request: Request, exc: Exception) -> JSONResponse:
        assert isinstance(exc, TidingsError)
        return error_response(request.method, request.url.path, exc)

    async def on_problem(request: Request, exc: Exception) -> JSONResponse:
        assert isinstance(exc, HTTPProblem)
        return problem_response(problem(exc.status, exc.code, exc.detail, title=exc.title),
                                exc.headers)

    async def on_validation(request: Request, exc: Exception) -> JSONResponse:
        assert isinstance(exc, RequestValidationError)
        return problem_response(from_validation(exc))

    async def on_http(request: Request, exc: Exception) -> JSONResponse:
        assert isinstance(exc, StarletteHTTPException)
        return problem_response(from_http(exc), exc.headers)

    app.add_exception_handler(TidingsError, on_tidings)
    app.add_exception_handler(HTTPProblem, on_problem)
    app.add_exception_handler(RequestValidationError, on_validation)
    app.add_exception_handler(StarletteHTTPException, on_http)


def documented(*statuses: int) -> dict[int | str, dict[str, Any]]:
    """The ``responses=`` of a route: each status answered with a :class:`Problem`."""
    return {status: {"model": Problem, "description": _DESCRIPTIONS[status]}
            for status in statuses}


_DESCRIPTIONS: Mapping[int, str] = {
    400: "The body is not well-formed JSON in UTF-8 (malformed_body).",
    401: "No bearer token, or an unknown one (unauthorized).",
    403: "The token is not allowed on this route (forbidden).",
    404: "No such id -- or another principal's: the answer is the same.",
    409: "The current state refuses it (conversation_closed, compaction_refused, ...).",
    413: "The body, or a payload in it, is larger than allowed (payload_too_large).",
    422: "The request is invalid (invalid_input, origin_not_allowed, ...).",
    429: "A bound is full: backlog_full or input_queue_full. Retry later.",
    500: "The service failed (internal_error, result_corrupt).",
    503: "The store or this instance cannot serve now, or a commit's outcome is unknown "
         "(commit_outcome_unknown: read before retrying).",
}


__all__ = (
    "KERNEL_FIELDS",
    "PROBLEM_MEDIA_TYPE",
    "STATUS",
    "FieldError",
    "HTTPProblem",
    "Problem",
    "documented",
    "error_response",
    "from_error",
    "install",
    "internal_error",
    "problem",
    "problem_response",
    "status_of",
    "title_of",
)

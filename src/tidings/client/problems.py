"""A problem document back into the library's own error: the service's :data:`STATUS` table,
inverted by ``code``, so a caller catches over HTTP exactly what it catches in process."""

from __future__ import annotations

from collections.abc import Mapping

import httpx
from pydantic import ValidationError

from tidings.errors import TidingsError
from tidings.service.problems import STATUS, Problem

CLASSES: Mapping[str, type[TidingsError]] = {cls.code: cls for cls in STATUS}
"""Every :class:`TidingsError` subclass the service answers with, by its stable code."""


class ServiceError(TidingsError):
    """The service refused the request with a problem no library error names (unauthorized,
    forbidden, no such route, an internal error); ``problem`` is its document."""

    code = "service_error"

    def __init__(self, problem: Problem) -> None:
        super().__init__(problem.detail)
        self.problem = problem
        self.status = problem.status
        self.code = problem.code


class ServiceUnreachableError(TidingsError):
    """The service could not be reached (refused, reset, timed out); nothing is known of the
    request's outcome."""

    code = "service_unreachable"

    def __init__(self, url: str, reason: str) -> None:
        super().__init__(f"cannot reach {url}: {reason}")
        self.url = url
        self.reason = reason


def problem_of(response: httpx.Response) -> Problem:
    """The refusal's problem document; a body that is not one is described as ``http_error``."""
    try:
        return Problem.model_validate_json(response.content)
    except ValidationError:
        text = response.text.strip()[:200] or response.reason_phrase
        return Problem(type="urn:tidings:problem:http_error", title="The request was refused.",
                       status=response.status_code, detail=f"HTTP {response.status_code}: {text}",
                       code="http_error")


def error_of(problem: Problem) -> TidingsError:
    """The library's error for ``problem``, its detail as the message. Its structured
    attributes (ids, limits) are not sent over HTTP, so they are not set."""
    cls = CLASSES.get(problem.code)
    if cls is None:
        return ServiceError(problem)
    # The classes' constructors take their structured attributes; the detail is already words.
    error = cls.__new__(cls)
    TidingsError.__init__(error, problem.detail)
    return error


__all__ = ("CLASSES", "ServiceError", "ServiceUnreachableError", "error_of", "problem_of")

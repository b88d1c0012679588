"""The Python client (P7): :class:`Client`, the library's verbs over HTTP, typed with the
service's own response models, raising the library's own errors. A front end like the command
line, which uses it: it knows the service's schemas and nothing below them."""

from __future__ import annotations

from tidings.client.api import Client
from tidings.client.feed import FeedLost, FeedResumed
from tidings.client.problems import ServiceError, ServiceUnreachableError

__all__ = ("Client", "FeedLost", "FeedResumed", "ServiceError", "ServiceUnreachableError")

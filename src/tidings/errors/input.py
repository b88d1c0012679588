"""Bad input: the request, the profile it names or the configuration file is malformed, and
nothing was written (or started)."""

from __future__ import annotations

from collections.abc import Sequence

from tidings.errors.base import TidingsError


class InvalidInputError(TidingsError):
    """The input is malformed; nothing was written."""

    code = "invalid_input"


class PayloadTooLargeError(InvalidInputError):
    """The payload is larger than the configured bound; nothing was written."""

    code = "payload_too_large"

    def __init__(self, size_bytes: int, limit_bytes: int) -> None:
        super().__init__(f"payload is {size_bytes} bytes; the limit is {limit_bytes} bytes")
        self.size_bytes = size_bytes
        self.limit_bytes = limit_bytes


class UnknownModelOrToolError(InvalidInputError):
    """The profile names a model or a tool this runtime does not have; nothing was written."""

    code = "unknown_model_or_tool"

    def __init__(
        self,
        *,
        unknown_models: Sequence[str],
        unknown_tools: Sequence[str],
        registered_models: Sequence[str],
        registered_tools: Sequence[str],
    ) -> None:
        said = []
        if unknown_models:
            said.append(f"unknown model(s) {', '.join(map(repr, unknown_models))} (registered: "
                        f"{', '.join(map(repr, registered_models)) or 'none'})")
        if unknown_tools:
            said.append(f"unknown tool(s) {', '.join(map(repr, unknown_tools))} (registered: "
                        f"{', '.join(map(repr, registered_tools)) or 'none'})")
        super().__init__("the profile names " + "; ".join(said))
        self.unknown_models = tuple(unknown_models)
        self.unknown_tools = tuple(unknown_tools)
        self.registered_models = tuple(registered_models)
        self.registered_tools = tuple(registered_tools)


class UnknownProfileError(InvalidInputError):
    """No profile of that name is configured; nothing was written."""

    code = "unknown_profile"

    def __init__(self, name: str, known: Sequence[str]) -> None:
        listed = ", ".join(sorted(known)) or "none is configured"
        super().__init__(f"no profile is named {name!r} (known: {listed})")
        self.name = name
        self.known = tuple(known)


class OriginNotAllowedError(InvalidInputError):
    """Only the kernel may write task_result and child inputs; nothing was written."""

    code = "origin_not_allowed"

    def __init__(self, origin: str) -> None:
        super().__init__(f"origin {origin!r} is the kernel's own; callers may not supply it")
        self.origin = origin


class PrivateTargetError(InvalidInputError):
    """A webhook's URL names (or resolves to) a private, loopback or link-local address, and the
    operator does not allow such targets; nothing was written."""

    code = "private_target"

    def __init__(self, url: str) -> None:
        super().__init__(
            f"url {url!r} names a private, loopback or link-local address; the operator may "
            "allow such targets (tidings serve --allow-private-webhooks)")
        self.url = url


class ConfigError(TidingsError):
    """The configuration file is malformed; nothing was started.

    ``line`` is the file's line at fault (1-based) when it could be found; ``key`` the dotted
    key path (``models.fast.api_key_env``) when one key is at fault.
    """

    code = "config_error"

    def __init__(
        self, message: str, *, path: str, line: int | None = None, key: str | None = None
    ) -> None:
        where = f"{path}:{line}" if line is not None else path
        super().__init__(f"{where}: {key}: {message}" if key else f"{where}: {message}")
        self.path = path
        self.line = line
        self.key = key
        self.reason = message

"""Where a push notification may go: http(s) URLs whose host is a public address.

A webhook is a request this server makes on a caller's behalf, so a caller could aim it at
what only this server reaches (a cloud's metadata service, a database on the private network,
the loopback). Refused unless the operator allows private targets (tests need the loopback):

- at a config's creation, the URL's host is resolved and every address it names is checked;
- at each delivery it is resolved again, checked again, and the request goes to the very
  address that was checked -- never resolved a second time by the HTTP client -- so a name that
  re-points to a private address after creation (DNS rebinding) reaches nothing.
"""

from __future__ import annotations

import asyncio
import ipaddress
import socket
from dataclasses import dataclass
from urllib.parse import urlsplit

from tidings.errors import InvalidInputError, PrivateTargetError
from tidings.support.policy import check_text

URL_LIMIT_BYTES = 2_048

IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address


def check_url(url: str) -> str:
    """An absolute http(s) URL with a host (where else could a notification go?)."""
    check_text(url, "url", limit_bytes=URL_LIMIT_BYTES)
    try:
        parts = urlsplit(url)
        parts.port  # noqa: B018 -- a port out of range raises here
    except ValueError:
        raise InvalidInputError(f"url {url!r} is not a URL") from None
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise InvalidInputError("url must be an absolute http:// or https:// URL")
    return url


def private(address: IPAddress) -> bool:
    """Whether an address is not on the public internet: loopback, private, link-local, shared,
    reserved, multicast, unspecified (an IPv4-mapped IPv6 address judged as its IPv4)."""
    if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None:
        address = address.ipv4_mapped
    return not address.is_global or address.is_multicast


@dataclass(frozen=True, slots=True)
class Target:
    """A checked URL and the address a request to it connects to."""

    url: str
    host: str
    port: int
    address: IPAddress

    def connect_url(self) -> str:
        """The URL with its host replaced by the checked address (the Host header and TLS
        name stay the host's)."""
        parts = urlsplit(self.url)
        literal = f"[{self.address}]" if self.address.version == 6 else str(self.address)
        netloc = f"{literal}:{self.port}"
        return parts._replace(netloc=netloc).geturl()

    def host_header(self) -> str:
        default = 443 if urlsplit(self.url).scheme == "https" else 80
        host = f"[{self.host}]" if ":" in self.host else self.host
        return host if self.port == default else f"{host}:{self.port}"


async def resolve(url: str, *, allow_private: bool) -> Target:
    """Check ``url`` and resolve its host to the one address a request connects to.

    Raises :class:`InvalidInputError` for a URL that is no http(s) URL or a host that does not
    resolve, :class:`PrivateTargetError` when any address it resolves to is private and the
    operator does not allow that.
    """
    check_url(url)
    parts = urlsplit(url)
    host = parts.hostname or ""
    port = parts.port or (443 if parts.scheme == "https" else 80)
    try:
        found = [ipaddress.ip_address(host)]
    except ValueError:
        try:
            infos = await asyncio.get_running_loop().getaddrinfo(
                host, port, type=socket.SOCK_STREAM)
        except OSError:
            raise InvalidInputError(f"the host of url {url!r} does not resolve") from None
        found = [ipaddress.ip_address(str(info[4][0]).partition("%")[0]) for info in infos]
    if not found:
        raise InvalidInputError(f"the host of url {url!r} does not resolve")
    if not allow_private and any(private(a) for a in found):
        raise PrivateTargetError(url)
    return Target(url, host, port, found[0])


__all__ = ("URL_LIMIT_BYTES", "Target", "check_url", "private", "resolve")

"""A push config's secrets (its token, its authentication's credentials) sealed under the master
key, as the results and MCP OAuth tokens are: AES-256-GCM under a key derived from the master
key (HKDF-SHA256, an info of its own), a fresh nonce each time, bound to the config's owner and
id (so a copy made for a later answer, the same owner's same config, opens too).

Sealed text reads ``sealed:v1:<base64>``. Without a master key a secret is kept as given (the
runtime says so at start); text that does not start with the prefix is such a secret.
"""

from __future__ import annotations

import base64
import os

from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.ciphers.aead import AESGCM
from cryptography.hazmat.primitives.kdf.hkdf import HKDF

from tidings.records.results import MasterKey

SEALED = "sealed:v1:"
SEAL_INFO = b"tidings a2a push config secrets v1"


def _box(master_key: MasterKey) -> AESGCM:
    hkdf = HKDF(algorithm=hashes.SHA256(), length=32, salt=None, info=SEAL_INFO)
    return AESGCM(hkdf.derive(master_key.secret))


def _bound(owner: str, config_id: str) -> bytes:
    return f"{owner}\x00{config_id}".encode()


def seal(master_key: MasterKey | None, secret: str, *, owner: str, config_id: str) -> str:
    """``secret`` sealed (empty stays empty; without a key, as given)."""
    if not secret or master_key is None:
        return secret
    nonce = os.urandom(12)
    box = _box(master_key).encrypt(nonce, secret.encode(), _bound(owner, config_id))
    return SEALED + base64.urlsafe_b64encode(nonce + box).decode("ascii")


def unseal(master_key: MasterKey | None, stored: str, *, owner: str,
           config_id: str) -> str | None:
    """What :func:`seal` sealed; ``None`` when it is sealed and no (or another) key opens it."""
    if not stored.startswith(SEALED):
        return stored
    if master_key is None:
        return None
    raw = base64.urlsafe_b64decode(stored[len(SEALED):])
    try:
        opened = _box(master_key).decrypt(raw[:12], raw[12:], _bound(owner, config_id))
    except InvalidTag:
        return None
    return opened.decode()


__all__ = ("SEALED", "seal", "unseal")

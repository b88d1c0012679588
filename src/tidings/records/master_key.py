"""The master key of the result envelopes (and of every other secret tidings seals): 32 bytes,
given, generated, or read from the environment or a key file -- never written to the database.
Each envelope's key is derived from it and the owning conversation (HKDF-SHA256)."""

from __future__ import annotations

import base64
import binascii
import os
import secrets
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.ciphers.aead import AESGCM
from cryptography.hazmat.primitives.kdf.hkdf import HKDF

from tidings.errors import MasterKeyError

MASTER_KEY_ENV = "TIDINGS_MASTER_KEY"
MASTER_KEY_FILE_ENV = "TIDINGS_MASTER_KEY_FILE"
KEY_VERSION = 1


@dataclass(frozen=True, slots=True)
class MasterKey:
    """32 bytes from which every envelope key is derived. Never stored in the database."""

    secret: bytes

    def __post_init__(self) -> None:
        if len(self.secret) != 32:
            raise MasterKeyError("the master key must be 32 bytes")

    def __repr__(self) -> str:  # never print the secret
        return "MasterKey(<32 bytes>)"

    @classmethod
    def generate(cls) -> MasterKey:
        return cls(secrets.token_bytes(32))

    @classmethod
    def parse(cls, text: str) -> MasterKey:
        """32 bytes written as 64 hex digits or as base64."""
        text = text.strip()
        try:
            raw = bytes.fromhex(text) if len(text) == 64 else base64.b64decode(text, validate=True)
        except (ValueError, binascii.Error):
            raise MasterKeyError("the master key is neither 64 hex digits nor base64") from None
        return cls(raw)

    @classmethod
    def from_environment(cls, environ: Mapping[str, str] | None = None) -> MasterKey:
        """From ``TIDINGS_MASTER_KEY``, or the file named by ``TIDINGS_MASTER_KEY_FILE``."""
        env = os.environ if environ is None else environ
        if env.get(MASTER_KEY_ENV):
            return cls.parse(env[MASTER_KEY_ENV])
        if env.get(MASTER_KEY_FILE_ENV):
            try:
                return cls.parse(Path(env[MASTER_KEY_FILE_ENV]).read_text("utf-8"))
            except OSError as exc:
                raise MasterKeyError(f"cannot read the master key file: {exc.strerror}") from None
        raise MasterKeyError(f"set {MASTER_KEY_ENV} or {MASTER_KEY_FILE_ENV}")

    def envelope_key(self, conversation_id: str, version: int = KEY_VERSION) -> AESGCM:
        hkdf = HKDF(
            algorithm=hashes.SHA256(), length=32, salt=None,
            info=f"tidings result envelope v{version}\x00{conversation_id}".encode(),
        )
        return AESGCM(hkdf.derive(self.secret))


__all__ = ("KEY_VERSION", "MASTER_KEY_ENV", "MASTER_KEY_FILE_ENV", "MasterKey")

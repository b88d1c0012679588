"""The store: the database refused the operation, classified by SQLite error name and
PostgreSQL SQLSTATE at the store boundary."""

from __future__ import annotations

from tidings.errors.base import TidingsError


class StoreError(TidingsError):
    """The database refused the operation."""

    code = "store_error"

    def __init__(self, message: str | None = None, *, db_code: str | None = None) -> None:
        super().__init__(message)
        self.db_code = db_code


class DatabaseBusyError(StoreError):
    """The database stayed locked by another writer past the busy timeout; nothing was written."""

    code = "database_busy"


class DiskFullError(StoreError):
    """The database's disk is full; nothing of this transaction was written."""

    code = "disk_full"


class ConnectionLostError(StoreError):
    """The connection to the database was lost before the transaction committed."""

    code = "connection_lost"


class CommitOutcomeUnknownError(StoreError):
    """The connection was lost while committing: the transaction may or may not have landed."""

    code = "commit_outcome_unknown"


class IntegrityViolationError(StoreError):
    """A database constraint refused the write."""

    code = "integrity_violation"


class ReadOnlyDatabaseError(StoreError):
    """The database is read-only."""

    code = "read_only_database"


class CorruptDatabaseError(StoreError):
    """The database file is corrupt or is not a database."""

    code = "corrupt_database"


class SchemaError(StoreError):
    """The database schema is newer than this version of tidings, or a migration failed."""

    code = "schema_error"


class DatabasePathError(StoreError):
    """The database file cannot be opened where it was asked for; nothing was created."""

    code = "database_path"

    def __init__(self, path: str, reason: str) -> None:
        super().__init__(f"cannot open the database {path!r}: {reason}")
        self.path = path
        self.reason = reason

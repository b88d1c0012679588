"""The keyring: the results' master key, once this process knows it.

Results are sealed with a master key (R3). A runtime is given it, finds it in the environment,
or -- booted locked (L1) -- is given it later by an unlock. Until then what needs results
(tasks that keep output, the retention sweep, the results tool) sees none and does without.
"""

from __future__ import annotations

import contextlib

from tidings.clock import Clock
from tidings.records.results import MasterKey, MasterKeyError, Results, ResultsConfig
from tidings.store import Store


class Keyring:
    """Holds :class:`Results` once the master key is known; never forgets a key it was given."""

    def __init__(
        self, store: Store, clock: Clock, config: ResultsConfig, master_key: MasterKey | None
    ) -> None:
        self._store, self._clock, self._config = store, clock, config
        if master_key is None:
            with contextlib.suppress(MasterKeyError):
                master_key = MasterKey.from_environment()
        self._master_key = master_key
        self._results = None if master_key is None else Results(store, clock, master_key, config)

    def known(self) -> Results | None:
        """The results, or ``None`` while no master key is known."""
        return self._results

    def master_key(self) -> MasterKey | None:
        """The master key, or ``None`` while none is known (what else it seals needs it)."""
        return self._master_key

    def results(self) -> Results:
        """The results; without a known key, the environment's (``MasterKeyError`` if none)."""
        if self._results is None:
            self.unlock(MasterKey.from_environment())
        assert self._results is not None
        return self._results

    def unlock(self, master_key: MasterKey) -> None:
        """Use ``master_key`` from now on."""
        self._master_key = master_key
        self._results = Results(self._store, self._clock, master_key, self._config)


__all__ = ("Keyring",)

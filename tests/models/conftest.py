"""The model adapters' tests: a real server on loopback that speaks each provider's protocol."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.models.loopback import LoopbackServer


@pytest.fixture
def server() -> Iterator[LoopbackServer]:
    """A loopback server whose replies a test scripts, recording every request it was sent."""
    with LoopbackServer() as running:
        yield running

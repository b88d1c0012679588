"""U10: ``Embedding`` takes its tokens the way round the command line writes them -- principal to
token, as ``--token alice=secret-a`` -- and refuses the reverse mapping, saying how to write it."""

from __future__ import annotations

import pytest
from fastapi import FastAPI
from fastapi.testclient import TestClient

import tidings
from tests.conftest import Backend
from tidings import ScriptedModel
from tidings.service import Embedding


def test_u10_embedding_tokens_map_principals_to_tokens(backend: Backend) -> None:
    agent = Embedding(lambda: tidings.open(backend.url, models=[ScriptedModel()]),
                      tokens={"alice": "secret-a", "bob": "secret-b"})
    app = FastAPI(lifespan=agent.lifespan)
    app.mount("/agent", agent.app)
    with TestClient(app) as client:
        made = client.post("/agent/v1/conversations", json={"profile": {"model": "scripted"}},
                           headers={"Authorization": "Bearer secret-a"})
        assert made.status_code == 201, made.text
        assert made.json()["owner"] == "alice"
        bobs = client.get("/agent/v1/conversations", headers={"Authorization": "Bearer secret-b"})
        assert bobs.json()["items"] == []
        named = client.get("/agent/v1/conversations", headers={"Authorization": "Bearer alice"})
        assert named.status_code == 401  # a principal's name is no token


def test_u10_embedding_refuses_tokens_written_the_old_way_round() -> None:
    with pytest.raises(ValueError, match="principal to its bearer token") as refused:
        Embedding(lambda: tidings.open("sqlite:///unused.db"), tokens={"secret-a": "alice"})
    assert "write it the other way round: tokens={'alice': 'secret-a'}" in str(refused.value)
    with pytest.raises(ValueError, match="one token names two principals"):
        Embedding(lambda: tidings.open("sqlite:///unused.db"),
                  tokens={"alice": "secret-a", "bob": "secret-a"})

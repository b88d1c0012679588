"""P1: besides the static bearer tokens, an identity provider's JWT bearer tokens name
principals -- verified against a configured JWKS (PyJWT), the principal taken from a configured
claim; an expired token, another issuer's, another audience's or one signed by another key is
refused (401, saying why), and changes nothing. Usable on every route the static ones are."""

from __future__ import annotations

import contextlib
import http.server
import json
import shlex
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import jwt
import pytest
from cryptography.hazmat.primitives.asymmetric import rsa

from tests.service.conftest import ALICE, Servers, assert_problem, open_conversation
from tests.service.test_b6_serve_config import listening
from tests.service.test_cli import ENV, WAIT_S, Lines, free_port
from tidings import ConfigError, load_settings
from tidings.service import JWTBearer

ISSUER = "https://idp.example"
SHARED_SECRET = "a-secret-shared-by-nobody-here-0123456789"
"""An HMAC key: a token signed with it is refused (tidings verifies with public keys only)."""
AUDIENCE = "tidings"


def key_pair() -> tuple[rsa.RSAPrivateKey, dict[str, Any]]:
    private = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    public = json.loads(jwt.algorithms.RSAAlgorithm.to_jwk(private.public_key()))
    return private, {**public, "kid": "k1", "use": "sig", "alg": "RS256"}


KEY, JWK = key_pair()
OTHER_KEY, _ = key_pair()


def token(*, sub: str = "carol", iss: str = ISSUER, aud: str = AUDIENCE,
          expires_in: float = 300, key: rsa.RSAPrivateKey = KEY, **claims: Any) -> str:
    payload = {"sub": sub, "iss": iss, "aud": aud, "exp": int(time.time() + expires_in),
               **claims}
    return jwt.encode(payload, key, algorithm="RS256", headers={"kid": "k1"})


@pytest.fixture
def jwks_file(tmp_path: Path) -> Path:
    path = tmp_path / "jwks.json"
    path.write_text(json.dumps({"keys": [JWK]}), "utf-8")
    return path


@contextlib.contextmanager
def jwks_served() -> Iterator[str]:
    """The JWKS over HTTP on loopback, as an identity provider publishes it."""
    body = json.dumps({"keys": [JWK]}).encode()

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args: Any) -> None:
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/.well-known/jwks.json"
    finally:
        server.shutdown()
        server.server_close()


async def test_p1_a_jwt_names_its_principal_who_sees_only_its_own(
    servers: Servers, jwks_file: Path,
) -> None:
    live = await servers(jwt=JWTBearer(jwks=str(jwks_file), issuer=ISSUER, audience=AUDIENCE))
    async with live.client(token()) as carol, live.client(ALICE) as alice:
        conv = await open_conversation(carol)
        got = await carol.get(f"/v1/conversations/{conv}")
        assert got.status_code == 200
        assert got.json()["owner"] == "carol"
        # Static tokens still work, and another principal's conversation is unknown to them.
        assert_problem(await alice.get(f"/v1/conversations/{conv}"), 404,
                       "unknown_conversation")
        alices = await open_conversation(alice)
        assert_problem(await carol.get(f"/v1/conversations/{alices}"), 404,
                       "unknown_conversation")
        # Every route takes it: the feed too.
        feed = await carol.get(f"/v1/conversations/{conv}/events.json")
        assert feed.status_code == 200


@pytest.mark.parametrize(("bad", "why"), [
    (lambda: token(expires_in=-120), "expired"),
    (lambda: token(iss="https://another.example"), "another issuer"),
    (lambda: token(aud="someone-else"), "another audience"),
    (lambda: token(key=OTHER_KEY), "not valid"),
    (lambda: jwt.encode({"sub": "carol", "iss": ISSUER, "aud": AUDIENCE,
                         "exp": int(time.time() + 300)}, SHARED_SECRET, algorithm="HS256"),
     "not valid"),
    (lambda: token(sub=""), "names no principal"),
    (lambda: "not.a.jwt", "not valid"),
])
async def test_p1_a_jwt_that_is_not_acceptable_is_refused_saying_why(
    servers: Servers, jwks_file: Path, bad: Any, why: str,
) -> None:
    live = await servers(jwt=JWTBearer(jwks=str(jwks_file), issuer=ISSUER, audience=AUDIENCE))
    async with live.client(bad()) as caller, live.client(token()) as carol:
        refused = await caller.post("/v1/conversations", json={"profile": {"model": "scripted"}})
        body = assert_problem(refused, 401, "unauthorized")
        assert why in body["detail"]
        assert refused.headers["www-authenticate"].startswith("Bearer")
        listed = await carol.get("/v1/conversations")
        assert listed.json()["items"] == []  # nothing was created


async def test_p1_a_jwks_url_is_fetched_and_its_keys_verify(servers: Servers) -> None:
    with jwks_served() as url:
        live = await servers(jwt=JWTBearer(jwks=url, issuer=ISSUER, audience=AUDIENCE,
                                           principal_claim="email"))
        async with live.client(token(email="dana@example.com")) as dana:
            conv = await open_conversation(dana)
            got = await dana.get(f"/v1/conversations/{conv}")
            assert got.json()["owner"] == "dana@example.com"


def test_p1_a_jwt_bearer_takes_public_keys_only() -> None:
    with pytest.raises(ValueError, match="public keys"):
        JWTBearer(jwks="keys.json", issuer=ISSUER, algorithms=("HS256",))


def test_p1_the_docs_serve_command_accepts_the_identity_providers_tokens(
    tmp_path: Path,
) -> None:
    docs = (Path(__file__).resolve().parents[2] / "docs" / "api.md").read_text("utf-8")
    [command] = [block.split("```", 1)[0] for block in docs.split("```sh\n")[1:]
                 if "--jwt-jwks" in block]
    arguments = shlex.split(command.replace("\\\n", " "))
    assert arguments[:2] == ["tidings", "serve"]
    port = free_port()
    with jwks_served() as url:
        arguments = [url if a == "https://idp.example/.well-known/jwks.json" else a
                     for a in arguments[2:]]
        process = subprocess.Popen(
            [sys.executable, "-m", "tidings", "serve", *arguments, "--port", str(port),
             "--database", str(tmp_path / "tidings.db")],
            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, env=ENV)
        assert process.stderr is not None
        try:
            Lines(process.stderr).wait_for("runtime started")
            listening(f"http://127.0.0.1:{port}")
            auth = {"Authorization": f"Bearer {token(email='erin@example.com')}"}
            created = httpx.post(f"http://127.0.0.1:{port}/v1/conversations",
                                 json={"profile": {"model": "scripted"}}, headers=auth,
                                 timeout=WAIT_S)
            assert created.status_code == 201, created.text
            assert created.json()["owner"] == "erin@example.com"
            expired = {"Authorization": f"Bearer {token(expires_in=-300)}"}
            refused = httpx.get(f"http://127.0.0.1:{port}/v1/conversations", headers=expired,
                                timeout=WAIT_S)
            assert refused.status_code == 401
        finally:
            process.send_signal(signal.SIGTERM)
            process.wait(WAIT_S)


def test_p1_the_config_files_serve_jwt_table_names_a_jwks_beside_it(
    tmp_path: Path, jwks_file: Path,
) -> None:
    config = tmp_path / "tidings.toml"
    config.write_text('[serve.jwt]\njwks = "jwks.json"\nissuer = "https://idp.example"\n'
                      'principal_claim = "email"\n', "utf-8")
    settings = load_settings(config)
    assert settings.jwt is not None
    assert (settings.jwt.jwks, settings.jwt.principal_claim) == (str(jwks_file), "email")
    config.write_text('[serve.jwt]\njwks = "jwks.json"\n', "utf-8")
    with pytest.raises(ConfigError, match=r"serve\.jwt\.issuer"):
        load_settings(config)


async def test_p1_the_agent_card_declares_both_schemes_and_a_jwt_reaches_a2a(
    servers: Servers, jwks_file: Path,
) -> None:
    live = await servers(jwt=JWTBearer(jwks=str(jwks_file), issuer=ISSUER, audience=AUDIENCE))
    async with live.client(None) as anonymous, live.client(token()) as carol:
        card = (await anonymous.get("/.well-known/agent-card.json")).json()
        schemes = card["securitySchemes"]
        assert schemes["bearer"]["httpAuthSecurityScheme"]["scheme"] == "Bearer"
        assert schemes["jwt"]["httpAuthSecurityScheme"]["bearerFormat"] == "JWT"
        assert ISSUER in schemes["jwt"]["httpAuthSecurityScheme"]["description"]
        assert len(card["securityRequirements"]) == 2  # either one
        listed = await carol.post(card["supportedInterfaces"][0]["url"], json={
            "jsonrpc": "2.0", "id": 1, "method": "ListTasks", "params": {}},
            headers={"A2A-Version": "1.0"})
        assert listed.status_code == 200, listed.text
        assert "error" not in listed.json(), listed.text

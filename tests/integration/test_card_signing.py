"""Agent card signing (spec §8.4): every algorithm, key rotation, the JWKS, the extended card
on all three bindings, interop with the a2a-sdk 1.3.0 verifier, and `python -m service card verify`."""

from __future__ import annotations

import asyncio
import base64
import json
import os
import sys

import httpx
import pytest
from a2a.client import ClientConfig, create_client
from a2a.types import a2a_pb2 as sdk
from a2a.utils.signing import InvalidSignaturesError, create_signature_verifier
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec, ed25519, rsa
from google.protobuf import json_format
from jwt import PyJWK

from a2a_cards.jws import verify_card_json
from a2a_cards.keys import key_from_pem
from gen import a2a_pb2 as pb
from service.app import config
from service.cards.signing import (
    CardSigner,
    canonical_payload,
)
from tests.conftest import ROOT

SECRET = "s3cret-" + "x" * 40
EXTENDED_SKILLS = [{"id": "more", "name": "More", "description": "extra", "tags": ["t"]}]


def private_pem(kind: str) -> bytes:
    key = {
        "ES256": lambda: ec.generate_private_key(ec.SECP256R1()),
        "RS256": lambda: rsa.generate_private_key(public_exponent=65537, key_size=2048),
        "EdDSA": ed25519.Ed25519PrivateKey.generate,
    }[kind]()
    return key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    )


def write_key(tmp_path, name: str, kind: str) -> str:
    path = tmp_path / name
    path.write_bytes(private_pem(kind))
    return str(path)


def protected(signature) -> dict:
    text = signature["protected"] if isinstance(signature, dict) else signature.protected
    return json.loads(base64.urlsafe_b64decode(text + "=" * (-len(text) % 4)))


async def fetch(service, path: str) -> httpx.Response:
    async with httpx.AsyncClient(
        base_url=f"http://127.0.0.1:{service.http_port}", timeout=10
    ) as client:
        return await client.get(path)


def sdk_verifier(
    jwks: dict | None, secret: str | None = None, algorithms=("ES256", "RS256", "EdDSA", "HS256")
):
    """a2a-sdk's verifier with a key provider over our JWKS (or the shared secret)."""

    def key_provider(kid, jku):
        if secret is not None:
            return secret.encode()
        for jwk in jwks["keys"]:
            if jwk["kid"] == kid:
                return PyJWK(jwk)
        raise AssertionError(f"no key {kid}")

    return create_signature_verifier(key_provider, list(algorithms))


def as_sdk_card(document: dict) -> sdk.AgentCard:
    return json_format.ParseDict(document, sdk.AgentCard(), ignore_unknown_fields=True)


async def signed_service(start_service, **settings):
    return await start_service(
        http_port=0,
        store="memory:",
        agent="tests.agents:ScriptedAgent",
        extended_card=True,
        extended_skills=EXTENDED_SKILLS,
        **settings,
    )


# ---------------------------------------------------------------- the canonical payload


def test_canonical_payload_is_the_one_the_sdk_verifies():
    from a2a.utils.signing import _canonicalize_agent_card  # the bytes its verifier checks

    card = pb.AgentCard(
        name="Agent é ✓ \U0001f600", description='line\nbreak "quoted"', version="1.0"
    )
    card.capabilities.streaming = True
    card.capabilities.push_notifications = False  # explicitly set: present in the payload
    ext = card.capabilities.extensions.add(uri="urn:x", required=True)
    ext.params.update(
        {"n": 1, "f": 0.5, "big": 1e21, "nested": {"a": [3, 2, 1], "s": "z"}, "empty": ""}
    )
    card.default_input_modes.extend(["text/plain"])
    card.skills.add(id="s", name="S", description="d", tags=["b", "a"])
    card.signatures.add(protected="x", signature="y")
    ours = canonical_payload(card)
    theirs = _canonicalize_agent_card(sdk.AgentCard.FromString(card.SerializeToString()))
    assert ours == theirs.encode("utf-8")
    doc = json.loads(ours)
    assert "signatures" not in doc and doc["capabilities"]["pushNotifications"] is False
    assert "empty" not in doc["capabilities"]["extensions"][0]["params"]


@pytest.mark.parametrize("kind", ["ES256", "RS256", "EdDSA"])
def test_signer_output_verifies_with_the_sdk_and_ourselves(tmp_path, kind):
    key = key_from_pem(private_pem(kind))
    signer = CardSigner([key], jku="https://agent.example/.well-known/jwks.json")
    card = signer.sign(pb.AgentCard(name="n", description="d", version="1"))
    header = protected(card.signatures[0])
    assert header == {
        "alg": kind,
        "typ": "JOSE",
        "kid": key.kid,
        "jku": "https://agent.example/.well-known/jwks.json",
    }
    jwks = signer.jwks()
    sdk_verifier(jwks)(sdk.AgentCard.FromString(card.SerializeToString()))
    document = json_format.MessageToDict(card)
    by_kid = {k.kid: k for k in [key]}
    assert (
        verify_card_json(document, lambda h: by_kid.get(h["kid"]), algorithms=[kind]).kid == key.kid
    )
    document["description"] = "tampered"
    with pytest.raises(ValueError, match="does not match"):
        verify_card_json(document, lambda h: by_kid.get(h["kid"]), algorithms=[kind])


def test_ecdsa_signatures_are_deterministic():
    key = key_from_pem(private_pem("ES256"))
    card = pb.AgentCard(name="n", description="d", version="1")
    assert CardSigner([key]).sign(card) == CardSigner([key]).sign(card)


# ---------------------------------------------------------------- served cards


@pytest.mark.parametrize("kind", ["ES256", "RS256", "EdDSA"])
async def test_public_card_is_signed_and_the_sdk_verifier_accepts_it(start_service, tmp_path, kind):
    service = await signed_service(
        start_service, card_signing_key_files=[write_key(tmp_path, "k.pem", kind)]
    )
    card = (await fetch(service, "/.well-known/agent-card.json")).json()
    jwks_response = await fetch(service, "/.well-known/jwks.json")
    assert jwks_response.status_code == 200
    assert jwks_response.headers["content-type"].startswith("application/jwk-set+json")
    jwks = jwks_response.json()
    [jwk] = jwks["keys"]
    assert jwk["alg"] == kind and jwk["use"] == "sig" and "d" not in jwk  # public members only
    [signature] = card["signatures"]
    header = protected(signature)
    assert header["alg"] == kind and header["typ"] == "JOSE" and header["kid"] == jwk["kid"]
    assert header["jku"] == f"http://127.0.0.1:{service.http_port}/.well-known/jwks.json"
    sdk_verifier(jwks)(as_sdk_card(card))

    card["name"] = "Someone else"
    with pytest.raises(InvalidSignaturesError):
        sdk_verifier(jwks)(as_sdk_card(card))


async def test_hs256_with_a_secret_from_a_file(start_service, tmp_path):
    secret_file = tmp_path / "card.secret"
    secret_file.write_text(SECRET + "\n")
    service = await signed_service(
        start_service, card_signing_secret_file=str(secret_file), card_signing_secret_kid="shared-1"
    )
    card = (await fetch(service, "/.well-known/agent-card.json")).json()
    header = protected(card["signatures"][0])
    assert header == {
        "alg": "HS256",
        "typ": "JOSE",
        "kid": "shared-1",
    }  # no jku: nothing to publish
    assert (await fetch(service, "/.well-known/jwks.json")).status_code == 404
    sdk_verifier(None, secret=SECRET)(as_sdk_card(card))
    with pytest.raises(InvalidSignaturesError):
        sdk_verifier(None, secret="another-secret-of-sufficient-length-000")(as_sdk_card(card))


async def test_rotation_signs_with_the_current_key_and_publishes_all(start_service, tmp_path):
    old_pem = private_pem("RS256")
    (tmp_path / "old.pem").write_bytes(old_pem)
    old_public = (
        serialization.load_pem_private_key(old_pem, None)
        .public_key()
        .public_bytes(serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo)
    )
    (tmp_path / "old.pub.pem").write_bytes(old_public)
    current = write_key(tmp_path, "new.pem", "ES256")
    service = await signed_service(
        start_service,
        card_signing_key_files=[f"2026-06={current}", f"2025-01={tmp_path / 'old.pub.pem'}"],
    )  # an older key: public part is enough
    card = (await fetch(service, "/.well-known/agent-card.json")).json()
    jwks = (await fetch(service, "/.well-known/jwks.json")).json()
    assert [(k["kid"], k["alg"]) for k in jwks["keys"]] == [
        ("2026-06", "ES256"),
        ("2025-01", "RS256"),
    ]
    assert [protected(s)["kid"] for s in card["signatures"]] == ["2026-06"]
    sdk_verifier(jwks)(as_sdk_card(card))
    # A card still signed with the previous key (cached by a client) verifies against the same JWKS.
    old_signed = CardSigner([key_from_pem(old_pem, "2025-01")]).sign(as_card(card))
    sdk_verifier(jwks)(sdk.AgentCard.FromString(old_signed.SerializeToString()))


def as_card(document: dict) -> pb.AgentCard:
    return json_format.ParseDict(document, pb.AgentCard(), ignore_unknown_fields=True)


async def test_replicas_serve_the_same_signed_card_and_etag(start_service, tmp_path):
    key = write_key(tmp_path, "k.pem", "ES256")
    public = dict(
        public_url="https://agent.example.com", grpc_public_address="agent.example.com:443"
    )
    seen = []
    for i in range(2):  # two replicas behind one load balancer
        service = await signed_service(
            start_service,
            card_signing_key_files=[key],
            **public,
            data_dir=str(tmp_path / f"replica-{i}"),
        )
        response = await fetch(service, "/.well-known/agent-card.json")
        seen.append((response.headers["etag"], response.json()["signatures"]))
    # Same card, same key: the same signature bytes (deterministic ECDSA), so the same ETag.
    assert seen[0] == seen[1]
    assert protected(seen[0][1][0])["jku"] == "https://agent.example.com/.well-known/jwks.json"


async def test_jku_can_be_left_out_or_set(start_service, tmp_path):
    key = write_key(tmp_path, "k.pem", "EdDSA")
    service = await signed_service(
        start_service,
        card_signing_key_files=[key],
        card_signing_jku="none",
        card_jwks_path="/keys/card.jwks",
    )
    card = (await fetch(service, "/.well-known/agent-card.json")).json()
    assert "jku" not in protected(card["signatures"][0])
    assert (await fetch(service, "/keys/card.jwks")).json()["keys"][0]["alg"] == "EdDSA"
    other = await signed_service(
        start_service,
        card_signing_key_files=[key],
        data_dir=str(tmp_path / "2"),
        card_signing_jku="https://keys.example.com/a2a.jwks",
    )
    card = (await fetch(other, "/.well-known/agent-card.json")).json()
    assert protected(card["signatures"][0])["jku"] == "https://keys.example.com/a2a.jwks"


@pytest.mark.parametrize("binding", ["GRPC", "JSONRPC", "HTTP+JSON"])
async def test_extended_card_is_signed_on_every_binding(start_service, tmp_path, binding):
    service = await signed_service(
        start_service,
        card_signing_key_files=[write_key(tmp_path, "k.pem", "ES256")],
        card_signing_secret=SECRET,
    )
    jwks = (await fetch(service, "/.well-known/jwks.json")).json()
    both = sdk_verifier(jwks)
    async with httpx.AsyncClient(timeout=10) as http:
        import grpc

        channels = []

        def channel_factory(url):
            channels.append(grpc.aio.insecure_channel(url))
            return channels[-1]

        client = await create_client(
            f"http://127.0.0.1:{service.http_port}",
            ClientConfig(
                streaming=False,
                supported_protocol_bindings=[binding],
                httpx_client=http,
                grpc_channel_factory=channel_factory,
            ),
        )
        try:
            card = await client.get_extended_agent_card(
                sdk.GetExtendedAgentCardRequest(), signature_verifier=both
            )
        finally:
            for channel in channels:
                await channel.close()
    assert [s.id for s in card.skills][-1] == "more"
    # One signature per configured kind: the asymmetric key and the shared secret.
    assert [protected(s)["alg"] for s in card.signatures] == ["ES256", "HS256"]
    sdk_verifier(None, secret=SECRET, algorithms=["HS256"])(card)


# ---------------------------------------------------------------- configuration


@pytest.mark.parametrize(
    ("settings", "message"),
    [
        ({"card_signing_secret": "short"}, "at least 32 bytes"),
        ({"card_signing_key_files": ["/nonexistent/key.pem"]}, "cannot read"),
        ({"card_signing_secret": SECRET, "card_signing_secret_file": "/x"}, "both set"),
        ({"card_jwks_path": "jwks.json"}, "card_jwks_path"),
        ({"card_signing_jku": "ftp://x"}, "card_signing_jku"),
    ],
)
def test_bad_signing_settings_stop_startup(settings, message):
    with pytest.raises(config.ConfigError, match=message):
        config.validate(config.Settings(**settings))


def test_the_current_key_must_be_private(tmp_path):
    pem = private_pem("ES256")
    public = (
        serialization.load_pem_private_key(pem, None)
        .public_key()
        .public_bytes(serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo)
    )
    (tmp_path / "pub.pem").write_bytes(public)
    with pytest.raises(config.ConfigError, match=r"card_signing_key_files\[0\]: .*private key"):
        config.validate(config.Settings(card_signing_key_files=[str(tmp_path / "pub.pem")]))


def test_the_secret_is_not_a_flag_and_not_in_repr():
    from service.app.cli import build_parser

    assert "--card-signing-secret" not in build_parser().format_help()
    assert SECRET not in repr(config.Settings(card_signing_secret=SECRET))


# ---------------------------------------------------------------- python -m service card verify


async def run_cli(*args: str, env: dict | None = None) -> tuple[int, str, str]:
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "service",
        "card",
        "verify",
        *args,
        cwd=ROOT,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
        env={**os.environ, **(env or {})},
    )
    out, err = await asyncio.wait_for(proc.communicate(), 60)
    return proc.returncode, out.decode(), err.decode()


async def test_cli_verifies_a_served_card(start_service, tmp_path):
    service = await signed_service(
        start_service, card_signing_key_files=[write_key(tmp_path, "k.pem", "RS256")]
    )
    base = f"http://127.0.0.1:{service.http_port}"
    code, out, err = await run_cli(base)
    assert code == 0, err
    assert "verified" in out and "RS256" in out and "/.well-known/jwks.json" in out

    # A tampered copy (read from a file) fails against the same keys.
    card = (await fetch(service, "/.well-known/agent-card.json")).json()
    card["description"] = "does something else"
    (tmp_path / "card.json").write_text(json.dumps(card))
    code, _, err = await run_cli(
        str(tmp_path / "card.json"), "--jwks", f"{base}/.well-known/jwks.json"
    )
    assert code == 1 and "does not match" in err

    # Keys that are not the signer's: no key for the kid.
    (tmp_path / "other.jwks").write_text(
        json.dumps(CardSigner([key_from_pem(private_pem("RS256"))]).jwks())
    )
    code, _, err = await run_cli(base, "--jwks", str(tmp_path / "other.jwks"))
    assert code == 1 and "no key for kid" in err


async def test_cli_hs256_secret_from_the_environment(start_service):
    service = await signed_service(start_service, card_signing_secret=SECRET)
    url = f"http://127.0.0.1:{service.http_port}/.well-known/agent-card.json"
    code, out, err = await run_cli(url, "--secret-env", "CARD_SECRET", env={"CARD_SECRET": SECRET})
    assert code == 0 and "HS256" in out, err
    code, _, err = await run_cli(url, "--secret-env", "CARD_SECRET", env={"CARD_SECRET": "y" * 40})
    assert code == 1
    code, _, err = await run_cli(url)  # no secret: cannot check an HS256 signature
    assert code == 1 and "HS256" in err


async def test_cli_unsigned_card_and_unreachable_agent(start_service):
    service = await start_service(http_port=0, store="memory:")
    code, _, err = await run_cli(f"http://127.0.0.1:{service.http_port}")
    assert code == 1 and "no signatures" in err
    code, _, err = await run_cli("http://127.0.0.1:9/")
    assert code == 2 and "cannot read" in err


async def test_cli_says_integrity_only_unless_the_keys_are_pinned(start_service, tmp_path):
    service = await signed_service(
        start_service, card_signing_key_files=[write_key(tmp_path, "k.pem", "ES256")]
    )
    base = f"http://127.0.0.1:{service.http_port}"
    code, out, err = await run_cli(base)  # the served card's jku: same origin, so used
    assert code == 0, err
    assert out.startswith("verified (integrity only: the key came from the card's own jku")
    code, out, err = await run_cli(base, "--jwks", f"{base}/.well-known/jwks.json")
    assert code == 0 and "integrity only" not in out and "pinned with --jwks" in out, err
    # A saved copy has no origin: its jku is refused unless allowed, and never read as a file.
    (tmp_path / "card.json").write_text(
        json.dumps((await fetch(service, "/.well-known/agent-card.json")).json())
    )
    code, _, err = await run_cli(str(tmp_path / "card.json"))
    assert code == 1 and "--allow-foreign-jku" in err
    code, out, err = await run_cli(str(tmp_path / "card.json"), "--allow-foreign-jku")
    assert code == 0 and "integrity only" in out, err

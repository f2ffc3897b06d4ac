"""JWK keys: generating, reading and writing private keys, their public halves, and signing.

Keys follow file 05 §2.2: a client signing key is a private JWK, `kty: EC` on `P-256` (ES256) or
`kty: RSA` of at least 2048 bits (RS256), with a `kid`. Secret files are written the way the
coordinator's file provider requires them: regular files, mode 0600, in a 0700 directory.
"""

from __future__ import annotations

import base64
import hashlib
import json
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Literal

from cryptography.hazmat.primitives.asymmetric import ec, rsa
from jwt.algorithms import ECAlgorithm, RSAAlgorithm

from coordinator_sandbox.canonical import canonical_json

__all__ = [
    "KeyKind",
    "SigningKey",
    "generate_private_jwk",
    "jwk_thumbprint",
    "public_jwk",
    "read_json_file",
    "write_secret_bytes",
    "write_secret_json",
]

KeyKind = Literal["EC", "RSA"]

_PUBLIC_MEMBERS = {"EC": ("kty", "crv", "x", "y"), "RSA": ("kty", "n", "e")}
_RSA_MINIMUM_BITS = 2048


def jwk_thumbprint(jwk: Mapping[str, Any]) -> str:
    """RFC 7638 thumbprint (SHA-256, base64url without padding) of a public or private JWK."""
    kty = jwk.get("kty")
    if kty not in _PUBLIC_MEMBERS:
        raise ValueError("only EC and RSA keys are supported")
    required = {name: jwk[name] for name in _PUBLIC_MEMBERS[kty]}
    digest = hashlib.sha256(canonical_json(required)).digest()
    return base64.urlsafe_b64encode(digest).rstrip(b"=").decode("ascii")


def generate_private_jwk(kind: KeyKind = "EC", kid: str | None = None) -> dict[str, Any]:
    """A fresh private JWK: P-256 for `EC` (ES256), RSA-2048 for `RSA` (RS256)."""
    jwk: dict[str, Any]
    if kind == "EC":
        jwk = dict(ECAlgorithm.to_jwk(ec.generate_private_key(ec.SECP256R1()), as_dict=True))
        alg = "ES256"
    else:
        private = rsa.generate_private_key(public_exponent=65537, key_size=_RSA_MINIMUM_BITS)
        jwk = dict(RSAAlgorithm.to_jwk(private, as_dict=True))
        alg = "RS256"
    jwk.pop("key_ops", None)
    jwk["alg"] = alg
    jwk["use"] = "sig"
    jwk["kid"] = kid or jwk_thumbprint(jwk)
    return jwk


def public_jwk(jwk: Mapping[str, Any]) -> dict[str, Any]:
    """The public half of a JWK: key members plus `kid`, `alg` and `use` when present."""
    kty = jwk.get("kty")
    if kty not in _PUBLIC_MEMBERS:
        raise ValueError("only EC and RSA keys are supported")
    result = {name: jwk[name] for name in _PUBLIC_MEMBERS[kty]}
    for name in ("kid", "alg", "use"):
        if name in jwk:
            result[name] = jwk[name]
    return result


class SigningKey:
    """A private JWK ready to sign: the algorithm follows from the key type (08 §2.2)."""

    def __init__(self, jwk: Mapping[str, Any]) -> None:
        kty = jwk.get("kty")
        kid = jwk.get("kid")
        if not isinstance(kid, str) or not kid:
            raise ValueError("a signing JWK needs a kid")
        if "d" not in jwk:
            raise ValueError("a signing JWK needs its private members")
        self.jwk: dict[str, Any] = dict(jwk)
        self.kid = kid
        text = json.dumps(self.jwk)
        if kty == "EC":
            if jwk.get("crv") != "P-256":
                raise ValueError("EC signing keys must be on P-256")
            self.algorithm = "ES256"
            self.key: Any = ECAlgorithm.from_jwk(text)
        elif kty == "RSA":
            self.algorithm = "RS256"
            self.key = RSAAlgorithm.from_jwk(text)
            if self.key.key_size < _RSA_MINIMUM_BITS:
                raise ValueError("RSA signing keys must have at least 2048 bits")
        else:
            raise ValueError("only EC and RSA keys are supported")

    @property
    def public(self) -> dict[str, Any]:
        return public_jwk(self.jwk)


def verification_key(jwk: Mapping[str, Any]) -> tuple[str, Any]:
    """(algorithm, key object) for a public JWK; ES256 for P-256, RS256 for RSA."""
    kty = jwk.get("kty")
    text = json.dumps(dict(jwk))
    if kty == "EC":
        if jwk.get("crv") != "P-256":
            raise ValueError("EC keys must be on P-256")
        return "ES256", ECAlgorithm.from_jwk(text)
    if kty == "RSA":
        return "RS256", RSAAlgorithm.from_jwk(text)
    raise ValueError("only EC and RSA keys are supported")


def read_json_file(path: Path) -> Any:
    """A JSON file's value; one trailing line feed is tolerated as in file 05 §2.2."""
    return json.loads(path.read_text(encoding="utf-8"))


def _ensure_private_directory(directory: Path) -> None:
    directory.mkdir(parents=True, exist_ok=True, mode=0o700)
    os.chmod(directory, 0o700)


def write_secret_bytes(path: Path, data: bytes) -> None:
    """Write a secret file as the coordinator's file provider accepts it (0600, 0700 parent)."""
    _ensure_private_directory(path.parent)
    temporary = path.with_name(f".{path.name}.tmp")
    descriptor = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    try:
        os.write(descriptor, data)
    finally:
        os.close(descriptor)
    os.chmod(temporary, 0o600)
    os.replace(temporary, path)


def write_secret_json(path: Path, value: Any) -> None:
    write_secret_bytes(path, (json.dumps(value, indent=2, sort_keys=True) + "\n").encode("utf-8"))

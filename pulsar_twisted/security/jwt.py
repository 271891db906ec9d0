"""
JSON Web Tokens as Pulsar's token authentication uses them (JWS compact form, RFC 7515/7519), on
``cryptography`` alone.

``encode(claims, key, alg)`` signs; ``decode(token, key, now=...)`` checks the signature, the
algorithm against the key's family (an HMAC secret only accepts HS*, an RSA key RS*/PS*, an EC
key ES*: a token cannot pick a weaker check than the key implies, the classic "alg confusion"),
``exp`` and ``nbf``, and returns the claims. Every refusal is an ``InvalidToken`` whose message
says why and never contains the token.

Keys are given as Pulsar gives them (``tokenSecretKey``/``tokenPublicKey``, ``--secret-key``):
``data:;base64,<bytes>``, ``file:///path``, or bare base64. Public and private keys may be DER
(what ``pulsar tokens create-key-pair`` writes, as Pulsar's does) or PEM.
"""

import base64
import binascii
import hmac
import json
import os
from typing import Optional

from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec, padding, rsa, utils

_HASHES = {"256": hashes.SHA256, "384": hashes.SHA384, "512": hashes.SHA512}
_EC_CURVES = {"ES256": ec.SECP256R1, "ES384": ec.SECP384R1, "ES512": ec.SECP521R1}
HMAC_ALGORITHMS = ("HS256", "HS384", "HS512")
RSA_ALGORITHMS = ("RS256", "RS384", "RS512", "PS256", "PS384", "PS512")
EC_ALGORITHMS = tuple(_EC_CURVES)
ALGORITHMS = HMAC_ALGORITHMS + RSA_ALGORITHMS + EC_ALGORITHMS

#: Tokens longer than this are refused before any decoding (they come from the network).
MAX_TOKEN_LENGTH = 16 * 1024


class InvalidToken(Exception):
    """A token that does not verify; the message is the reason (never the token itself)."""


class KeyFormatError(ValueError):
    """A key specification or key file that cannot be used."""


def _b64url_encode(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode("ascii")


def _b64url_decode(text: str) -> bytes:
    try:
        return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))
    except (binascii.Error, ValueError):
        raise InvalidToken("malformed token (bad base64url)")


# ------------------------------------------------------------------------------------ keys
def read_key_spec(spec: str) -> bytes:
    """The bytes a Pulsar key setting names: ``data:;base64,...``, ``file:///path`` or base64."""
    spec = spec.strip()
    if spec.startswith("data:"):
        header, _, payload = spec.partition(",")
        if ";base64" in header:
            try:
                return base64.b64decode(payload, validate=False)
            except binascii.Error as e:
                raise KeyFormatError(f"bad base64 in data: key ({e})")
        return payload.encode()
    if spec.startswith("file:"):
        path = spec[len("file:"):]
        if path.startswith("//"):
            path = path[2:]
        try:
            with open(path, "rb") as f:
                return f.read()
        except OSError as e:
            raise KeyFormatError(f"cannot read key file {path}: {e.strerror}")
    if os.path.exists(spec):
        with open(spec, "rb") as f:
            return f.read()
    try:
        return base64.b64decode(spec, validate=True)
    except binascii.Error:
        raise KeyFormatError("key is neither data:, file: nor base64")


def load_public_key(data: bytes):
    """A public key from DER (X.509 SubjectPublicKeyInfo) or PEM bytes."""
    try:
        if data.lstrip().startswith(b"-----BEGIN"):
            return serialization.load_pem_public_key(data)
        return serialization.load_der_public_key(data)
    except ValueError as e:
        raise KeyFormatError(f"not a public key: {e}")


def load_private_key(data: bytes):
    """A private key from DER (PKCS#8) or PEM bytes."""
    try:
        if data.lstrip().startswith(b"-----BEGIN"):
            return serialization.load_pem_private_key(data, password=None)
        return serialization.load_der_private_key(data, password=None)
    except (ValueError, TypeError) as e:
        raise KeyFormatError(f"not a private key: {e}")


def algorithms_for_key(key) -> tuple:
    """The algorithms a key may verify: its family only."""
    if isinstance(key, (bytes, bytearray)):
        return HMAC_ALGORITHMS
    if isinstance(key, (rsa.RSAPublicKey, rsa.RSAPrivateKey)):
        return RSA_ALGORITHMS
    if isinstance(key, (ec.EllipticCurvePublicKey, ec.EllipticCurvePrivateKey)):
        return tuple(a for a, curve in _EC_CURVES.items() if isinstance(key.curve, curve))
    raise KeyFormatError(f"unsupported key type {type(key).__name__}")


# ------------------------------------------------------------------------------------ signing
def _sign(alg: str, key, data: bytes) -> bytes:
    digest = _HASHES[alg[2:]]()
    if alg.startswith("HS"):
        return hmac.new(bytes(key), data, digest.name).digest()
    if alg.startswith("RS"):
        return key.sign(data, padding.PKCS1v15(), digest)
    if alg.startswith("PS"):
        return key.sign(data, padding.PSS(mgf=padding.MGF1(digest), salt_length=digest.digest_size),
                        digest)
    der = key.sign(data, ec.ECDSA(digest))
    r, s = utils.decode_dss_signature(der)
    size = (key.curve.key_size + 7) // 8
    return r.to_bytes(size, "big") + s.to_bytes(size, "big")


def _verify(alg: str, key, data: bytes, signature: bytes) -> bool:
    digest = _HASHES[alg[2:]]()
    try:
        if alg.startswith("HS"):
            return hmac.compare_digest(hmac.new(bytes(key), data, digest.name).digest(), signature)
        if alg.startswith("RS"):
            key.verify(signature, data, padding.PKCS1v15(), digest)
        elif alg.startswith("PS"):
            key.verify(signature, data, padding.PSS(mgf=padding.MGF1(digest),
                                                    salt_length=padding.PSS.AUTO), digest)
        else:
            size = (key.curve.key_size + 7) // 8
            if len(signature) != 2 * size:
                return False
            r = int.from_bytes(signature[:size], "big")
            s = int.from_bytes(signature[size:], "big")
            key.verify(utils.encode_dss_signature(r, s), data, ec.ECDSA(digest))
        return True
    except (InvalidSignature, ValueError):
        return False


def encode(claims: dict, key, alg: str = "HS256") -> str:
    """A signed token carrying ``claims``; ``key`` is the secret (bytes) or a private key."""
    if alg not in ALGORITHMS:
        raise ValueError(f"unsupported algorithm {alg}")
    if alg not in algorithms_for_key(key):
        raise ValueError(f"algorithm {alg} does not match the key")
    header = _b64url_encode(json.dumps({"alg": alg}, separators=(",", ":")).encode())
    payload = _b64url_encode(json.dumps(claims, separators=(",", ":")).encode())
    signing_input = f"{header}.{payload}".encode("ascii")
    return f"{header}.{payload}.{_b64url_encode(_sign(alg, key, signing_input))}"


def decode(token, key, now: Optional[float] = None, algorithms=None, leeway: float = 0) -> dict:
    """
    The claims of ``token`` once its signature verifies with ``key`` and it is current at ``now``
    (seconds since the epoch; None skips the time checks). ``InvalidToken`` otherwise.
    """
    if isinstance(token, bytes):
        try:
            token = token.decode("ascii")
        except UnicodeDecodeError:
            raise InvalidToken("malformed token (not ASCII)")
    token = token.strip()
    if len(token) > MAX_TOKEN_LENGTH:
        raise InvalidToken("token too long")
    parts = token.split(".")
    if len(parts) != 3:
        raise InvalidToken("malformed token (expected header.payload.signature)")
    try:
        header = json.loads(_b64url_decode(parts[0]))
        claims = json.loads(_b64url_decode(parts[1]))
    except (ValueError, UnicodeDecodeError):
        raise InvalidToken("malformed token (bad JSON)")
    if not isinstance(header, dict) or not isinstance(claims, dict):
        raise InvalidToken("malformed token (header and claims must be JSON objects)")
    alg = header.get("alg")
    allowed = algorithms if algorithms is not None else algorithms_for_key(key)
    if alg not in ALGORITHMS or alg not in allowed:
        raise InvalidToken(f"token algorithm {alg!r} not accepted (expected one of {', '.join(allowed)})")
    if hasattr(key, "public_key") and not isinstance(key, (bytes, bytearray)):
        key = key.public_key()
    signing_input = f"{parts[0]}.{parts[1]}".encode("ascii")
    if not _verify(alg, key, signing_input, _b64url_decode(parts[2])):
        raise InvalidToken("token signature does not verify")
    if now is not None:
        exp = claims.get("exp")
        if exp is not None:
            if not isinstance(exp, (int, float)):
                raise InvalidToken("malformed token (exp is not a number)")
            if now > exp + leeway:
                raise InvalidToken("token expired")
        nbf = claims.get("nbf")
        if isinstance(nbf, (int, float)) and now + leeway < nbf:
            raise InvalidToken("token not valid yet")
    return claims


def parse_duration(text: str) -> int:
    """Seconds of a relative time as Pulsar's CLI writes it: ``30s``, ``10m``, ``1h``, ``2d``, ``1w``,
    ``1y`` (a bare number is seconds)."""
    units = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 7 * 86400, "y": 365 * 86400}
    text = text.strip().lower()
    if not text:
        raise ValueError("empty duration")
    if text[-1] in units:
        number, unit = text[:-1], units[text[-1]]
    else:
        number, unit = text, 1
    try:
        value = int(number)
    except ValueError:
        raise ValueError(f"bad duration {text!r} (expected e.g. 30s, 10m, 1h, 2d, 1w, 1y)")
    if value < 0:
        raise ValueError("duration must not be negative")
    return value * unit

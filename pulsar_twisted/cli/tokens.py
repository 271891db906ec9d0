"""
``pulsar tokens``: keys and JWT tokens for token authentication, as Pulsar's ``bin/pulsar tokens``.

    pulsar tokens create-secret-key [--output F] [--base64]
    pulsar tokens create-key-pair --output-private-key F --output-public-key F [-a RS256|ES256]
    pulsar tokens create --subject ROLE (--secret-key SPEC | --private-key SPEC) [--expiry-time 1h]
    pulsar tokens show TOKEN
    pulsar tokens validate TOKEN (--secret-key SPEC | --public-key SPEC)

Key SPECs are ``file:///path``, ``data:;base64,...`` or base64 (Pulsar's forms). Keys are written
as Pulsar writes them: a raw 256-bit secret (or its base64), DER PKCS#8 private and DER X.509
public keys. Errors print one line on stderr and exit 1.
"""

import base64
import json
import os
import sys
import time

from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec, rsa

from pulsar_twisted.security import jwt


class TokenCommandError(Exception):
    """A user error: printed as ``pulsar tokens <cmd>: error: ...``."""


def add_tokens_parser(commands) -> None:
    """Register ``tokens`` and its subcommands on the ``pulsar`` CLI's subparsers."""
    tokens = commands.add_parser("tokens", help="create and check keys and JWT tokens")
    sub = tokens.add_subparsers(dest="tokens_command", metavar="SUBCOMMAND")
    sub.required = True

    secret = sub.add_parser("create-secret-key", help="a new secret key (HS256)")
    secret.add_argument("-o", "--output", help="file to write (default: stdout)")
    secret.add_argument("-e", "--base64", action="store_true", help="write the key in base64")
    secret.add_argument("-a", "--signature-algorithm", default="HS256", choices=jwt.HMAC_ALGORITHMS)
    secret.set_defaults(tokens_run=_create_secret_key)

    pair = sub.add_parser("create-key-pair", help="a new private/public key pair (RS256, ES256...)")
    pair.add_argument("-a", "--signature-algorithm", default="RS256",
                      choices=jwt.RSA_ALGORITHMS + jwt.EC_ALGORITHMS)
    pair.add_argument("--output-private-key", required=True)
    pair.add_argument("--output-public-key", required=True)
    pair.set_defaults(tokens_run=_create_key_pair)

    create = sub.add_parser("create", help="a new token for a role")
    create.add_argument("-s", "--subject", required=True, help="the role (claim sub)")
    keys = create.add_mutually_exclusive_group(required=True)
    keys.add_argument("-sk", "--secret-key", help="secret key SPEC (file:///..., data:;base64,...)")
    keys.add_argument("-pk", "--private-key", help="private key SPEC (file:///..., data:;base64,...)")
    create.add_argument("-exp", "--expiry-time", help="relative expiry: 30s, 10m, 1h, 2d, 1w, 1y")
    create.add_argument("-a", "--signature-algorithm", default=None, choices=jwt.ALGORITHMS,
                        help="default: the key's (HS256, RS256 or ES256/384/512)")
    create.add_argument("--claim", action="append", default=[], metavar="NAME=VALUE",
                        help="an extra claim (repeatable)")
    create.set_defaults(tokens_run=_create)

    show = sub.add_parser("show", help="print a token's claims without checking it")
    show.add_argument("token")
    show.set_defaults(tokens_run=_show)

    validate = sub.add_parser("validate", help="check a token's signature and expiry, print its claims")
    validate.add_argument("token")
    vkeys = validate.add_mutually_exclusive_group(required=True)
    vkeys.add_argument("-sk", "--secret-key")
    vkeys.add_argument("-pk", "--public-key")
    validate.set_defaults(tokens_run=_validate)


def run(args, out=None, err=None) -> int:
    """Run the parsed ``tokens`` subcommand; the exit code."""
    out = out or sys.stdout
    err = err or sys.stderr
    try:
        args.tokens_run(args, out)
    except (TokenCommandError, jwt.InvalidToken, jwt.KeyFormatError, ValueError, OSError) as e:
        print(f"pulsar tokens {args.tokens_command}: error: {e}", file=err)
        return 1
    return 0


def _emit(data: bytes, path, out) -> None:
    if path:
        with open(path, "wb") as f:
            f.write(data)
        os.chmod(path, 0o600)
    else:
        out.write(data.decode("ascii") + "\n")


def _create_secret_key(args, out) -> None:
    size = {"HS256": 32, "HS384": 48, "HS512": 64}[args.signature_algorithm]
    key = os.urandom(size)
    if args.base64 or not args.output:
        # A raw key cannot go to a terminal: stdout always gets base64.
        key = base64.b64encode(key)
    _emit(key, args.output, out)


def _create_key_pair(args, out) -> None:
    alg = args.signature_algorithm
    if alg.startswith(("RS", "PS")):
        key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    else:
        key = ec.generate_private_key(jwt._EC_CURVES[alg]())
    private = key.private_bytes(serialization.Encoding.DER, serialization.PrivateFormat.PKCS8,
                                serialization.NoEncryption())
    public = key.public_key().public_bytes(serialization.Encoding.DER,
                                           serialization.PublicFormat.SubjectPublicKeyInfo)
    _emit(private, args.output_private_key, out)
    with open(args.output_public_key, "wb") as f:
        f.write(public)


def _create(args, out) -> None:
    if args.secret_key:
        key = jwt.read_key_spec(args.secret_key)
    else:
        key = jwt.load_private_key(jwt.read_key_spec(args.private_key))
    alg = args.signature_algorithm or jwt.algorithms_for_key(key)[0]
    if alg not in jwt.algorithms_for_key(key):
        raise TokenCommandError(f"algorithm {alg} does not match the key")
    claims = {"sub": args.subject}
    if args.expiry_time:
        claims["exp"] = int(time.time()) + jwt.parse_duration(args.expiry_time)
    for claim in args.claim:
        name, sep, value = claim.partition("=")
        if not sep:
            raise TokenCommandError(f"--claim {claim!r}: expected NAME=VALUE")
        claims[name] = value
    out.write(jwt.encode(claims, key, alg) + "\n")


def _show(args, out) -> None:
    parts = args.token.strip().split(".")
    if len(parts) != 3:
        raise TokenCommandError("not a JWT (expected header.payload.signature)")
    claims = json.loads(jwt._b64url_decode(parts[1]))
    out.write(json.dumps(claims, sort_keys=True) + "\n")


def _validate(args, out) -> None:
    if args.secret_key:
        key = jwt.read_key_spec(args.secret_key)
    else:
        key = jwt.load_public_key(jwt.read_key_spec(args.public_key))
    claims = jwt.decode(args.token, key, now=time.time())
    out.write(json.dumps(claims, sort_keys=True) + "\n")

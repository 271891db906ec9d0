"""``pulsar tokens``: keys and tokens interoperate with the broker's token provider."""

import base64
import io
import json
import os

from twisted.internet import task
from twisted.trial import unittest

from pulsar_twisted.cli.pulsar import build_parser
from pulsar_twisted.cli.tokens import run
from pulsar_twisted.config import StandaloneConfig
from pulsar_twisted.security.auth import Credentials, TokenAuthenticationProvider


def tokens(*argv):
    out, err = io.StringIO(), io.StringIO()
    code = run(build_parser().parse_args(["tokens", *argv]), out, err)
    return code, out.getvalue().strip(), err.getvalue().strip()


class TokensCliTests(unittest.TestCase):
    def setUp(self):
        self.dir = self.mktemp()
        os.makedirs(self.dir)

    def path(self, name):
        return os.path.join(self.dir, name)

    def test_secret_key_flow(self):
        """create-secret-key, create with it, validate; the broker provider accepts the token."""
        self.assertEqual(tokens("create-secret-key", "--output", self.path("s.key"))[0], 0)
        self.assertEqual(len(open(self.path("s.key"), "rb").read()), 32)
        code, token, _ = tokens("create", "--subject", "alice", "--secret-key",
                                f"file://{self.path('s.key')}", "--expiry-time", "1h")
        self.assertEqual(code, 0)
        code, claims, _ = tokens("validate", token, "-sk", f"file://{self.path('s.key')}")
        self.assertEqual(json.loads(claims)["sub"], "alice")
        secret = base64.b64encode(open(self.path("s.key"), "rb").read()).decode()
        provider = TokenAuthenticationProvider(StandaloneConfig(tokenSecretKey=f"data:;base64,{secret}"),
                                               task.Clock())
        self.assertEqual(provider.authenticate(Credentials("token", token.encode())).role, "alice")
        code, b64, _ = tokens("create-secret-key", "--base64")
        self.assertEqual(len(base64.b64decode(b64)), 32)

    def test_key_pairs(self):
        for alg in ("RS256", "ES256"):
            priv, pub = self.path(f"{alg}.key"), self.path(f"{alg}.pub")
            self.assertEqual(tokens("create-key-pair", "-a", alg, "--output-private-key", priv,
                                    "--output-public-key", pub)[0], 0)
            code, token, _ = tokens("create", "-s", "svc", "--private-key", f"file://{priv}")
            self.assertEqual(code, 0)
            self.assertEqual(json.loads(tokens("validate", token, "-pk", f"file://{pub}")[1]), {"sub": "svc"})
            provider = TokenAuthenticationProvider(
                StandaloneConfig(tokenPublicKey=f"file://{pub}", tokenPublicAlg=alg), task.Clock())
            self.assertEqual(provider.authenticate(Credentials("token", token.encode())).role, "svc")

    def test_errors(self):
        """Expired or forged tokens and missing keys: exit 1 with a one-line reason."""
        tokens("create-secret-key", "--output", self.path("k"))
        tokens("create-secret-key", "--output", self.path("other"))
        code, token, _ = tokens("create", "-s", "a", "-sk", f"file://{self.path('k')}", "-exp", "0s")
        import time
        time.sleep(1.1)
        code, _, err = tokens("validate", token, "-sk", f"file://{self.path('k')}")
        self.assertEqual((code, "expired" in err), (1, True))
        code, _, err = tokens("validate", token, "-sk", f"file://{self.path('other')}")
        self.assertEqual(code, 1)
        code, _, err = tokens("create", "-s", "a", "-sk", "file:///nonexistent")
        self.assertEqual(code, 1)
        self.assertIn("cannot read key file", err)
        self.assertEqual(json.loads(tokens("show", token)[1])["sub"], "a")

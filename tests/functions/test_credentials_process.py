"""
A function on an authenticated standalone: token authentication and authorization on, the
worker's (and its instances') credentials in brokerClientAuthentication*. The function is created
with a super-user token through ``/admin/v3`` (multipart, as ``pulsar-admin functions create``
sends it); its instance must authenticate itself to consume, produce and keep its counters, and
the official client (a token too) produces its input and reads its output.
"""

import json
import os
import textwrap
import time
import urllib.error
import urllib.request

from pulsar_twisted.cli.admin.functions import multipart_body
from tests.interop.test_core import pulsar
from tests.interop.test_security import SECRET_SPEC, SecureCase, token

COUNTING = textwrap.dedent('''
    import pulsar

    class Counting(pulsar.Function):
        """Counts each input in the function's state (HTTP calls to the worker)."""

        def process(self, input, context):
            context.incr_counter(input, 1)
            return "%s:%d" % (input, context.get_counter(input))
''')

TOKEN_PLUGIN = "org.apache.pulsar.client.impl.auth.AuthenticationToken"


class AuthenticatedFunctionTests(SecureCase):
    needs_auth = True
    receive_timeout_ms = 20000
    extra_config = {"authenticationEnabled": "true", "authorizationEnabled": "true",
                    "superUserRoles": "admin,worker",
                    "authenticationProviders":
                        "org.apache.pulsar.broker.authentication.AuthenticationProviderToken",
                    "tokenSecretKey": SECRET_SPEC, "journalSyncData": "false",
                    "brokerClientAuthenticationPlugin": TOKEN_PLUGIN,
                    "brokerClientAuthenticationParameters": "token:" + token("worker")}

    def call(self, method, path, body=None, content_type=None, role="admin"):
        headers = {"Authorization": f"Bearer {token(role)}"} if role else {}
        if content_type:
            headers["Content-Type"] = content_type
        request = urllib.request.Request(self.standalone.web_service_url + path, data=body,
                                         method=method, headers=headers)
        try:
            with urllib.request.urlopen(request, timeout=15) as response:
                return response.status, response.read()
        except urllib.error.HTTPError as e:
            return e.code, e.read()

    def wait_running(self, path, timeout=40.0):
        deadline = time.monotonic() + timeout
        while True:
            code, body = self.call("GET", f"{path}/status")
            if code == 200 and json.loads(body)["numRunning"] == 1:
                return
            if time.monotonic() > deadline:
                self.fail(f"not running within {timeout}s: {code} {body!r}\n"
                          + self.standalone.log_tail(40))
            time.sleep(0.2)

    def test_function_instance_authenticates_itself(self):
        inp, out = self.topic("in", "persistent"), self.topic("out", "persistent")
        path = "/admin/v3/functions/public/default/counting"
        config = {"tenant": "public", "namespace": "default", "name": "counting",
                  "className": "counting.Counting", "inputs": [inp], "output": out, "runtime": "PYTHON",
                  "subscriptionPosition": "Earliest"}
        body, ctype = multipart_body([
            ("functionConfig", None, json.dumps(config).encode(), "application/json"),
            ("data", "counting.py", COUNTING.encode(), "application/octet-stream")])
        code, answer = self.call("POST", path, body, ctype, role=None)
        self.assertEqual(code, 401, answer)
        code, answer = self.call("POST", path, body, ctype, role="nobody")
        self.assertEqual(code, 403, answer)
        code, answer = self.call("POST", path, body, ctype)
        self.assertIn(code, (200, 204), answer)
        self.wait_running(path)
        spec = os.path.join(self.standalone.data_directory, "functions", "public", "default",
                            "counting", "instance.json")
        self.assertEqual(os.stat(spec).st_mode & 0o777, 0o600)
        client = self.new_client(authentication=pulsar.AuthenticationToken(token("admin")))
        consumer = client.subscribe(out, "test", initial_position=pulsar.InitialPosition.Earliest)
        producer = client.create_producer(inp)
        for text in ("a", "b", "a"):
            producer.send(text.encode())
        try:
            got = [self.receive(consumer).data() for _ in range(3)]
        except self.failureException:
            with open(os.path.join(os.path.dirname(spec), "logs", "instance-0.log")) as f:
                self.fail("no output; the instance's log:\n" + f.read()[-3000:])
        self.assertEqual(got, [b"a:1", b"b:1", b"a:2"])
        code, answer = self.call("GET", f"{path}/state/a")
        self.assertEqual(code, 200, answer)
        self.assertEqual(json.loads(answer)["numberValue"], 2)
        code, answer = self.call("GET", f"{path}/state/a", role="nobody")
        self.assertEqual(code, 403, answer)
        self.assertNotIn(token("worker"), self.standalone.log_text())
        code, answer = self.call("DELETE", path)
        self.assertIn(code, (200, 204), answer)

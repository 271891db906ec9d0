"""
``pulsar-admin`` verbs of the load manager (namespaces unload / split-bundle, topics bundle-range,
broker-stats load-report / load-decisions) mapped to their REST calls, and the admin client
following a broker's 307 to the bundle owner for every method.
"""

import http.server
import threading

from twisted.trial.unittest import SynchronousTestCase

from pulsar_twisted.cli import admin as cli


class Recorder:
    def __init__(self):
        self.calls = []

    def request(self, method, path, body=None, query=None, raw=False):
        self.calls.append((method, path, query))

    def get(self, path, **kw):
        return self.request("GET", path, **kw)

    def put(self, path, body=None, **kw):
        return self.request("PUT", path, body, **kw)


def call(*argv):
    args = cli.build_parser().parse_args(list(argv))
    client = Recorder()
    args.run(args, client)
    return client.calls


class VerbTests(SynchronousTestCase):

    def test_unload(self):
        self.assertEqual(call("namespaces", "unload", "t/ns"),
                         [("PUT", "/admin/v2/namespaces/t/ns/unload", None)])
        self.assertEqual(call("namespaces", "unload", "t/ns", "-b", "0x00000000_0x40000000"),
                         [("PUT", "/admin/v2/namespaces/t/ns/0x00000000_0x40000000/unload", None)])

    def test_split_bundle(self):
        [(method, path, query)] = call("namespaces", "split-bundle", "t/ns", "-b", "0x00000000_0x40000000",
                                       "--split-algorithm-name", "topic_count_equally_divide", "-u")
        self.assertEqual((method, path), ("PUT", "/admin/v2/namespaces/t/ns/0x00000000_0x40000000/split"))
        self.assertEqual(query, {"unload": "true", "splitAlgorithmName": "topic_count_equally_divide"})

    def test_bundle_range_and_broker_stats(self):
        self.assertEqual(call("topics", "bundle-range", "t1"),
                         [("GET", "/admin/v2/persistent/public/default/t1/bundle", None)])
        self.assertEqual(call("broker-stats", "load-report"),
                         [("GET", "/admin/v2/broker-stats/load-report", None)])
        self.assertEqual(call("broker-stats", "load-decisions", "-k", "shed"),
                         [("GET", "/admin/v2/broker-stats/load-decisions", {"kind": "shed"})])


class _Handler(http.server.BaseHTTPRequestHandler):
    def do_PUT(self):
        if self.path.startswith("/first"):
            self.send_response(307)
            self.send_header("Location", f"http://127.0.0.1:{self.server.server_port}/owner{self.path[6:]}")
            self.send_header("Content-Length", "0")
            self.end_headers()
            return
        self.server.seen.append(self.path)
        self.send_response(204)
        self.end_headers()

    def log_message(self, *args):
        pass


class RedirectTests(SynchronousTestCase):

    def test_put_follows_307_to_the_owner(self):
        server = http.server.HTTPServer(("127.0.0.1", 0), _Handler)
        server.seen = []
        thread = threading.Thread(target=server.serve_forever, daemon=True)
        thread.start()
        self.addCleanup(server.server_close)
        self.addCleanup(server.shutdown)
        client = cli.AdminClient(f"http://127.0.0.1:{server.server_port}", timeout=5)
        self.assertIsNone(client.put("/first/admin/v2/namespaces/t/ns/0x0_0x1/split"))
        self.assertEqual(server.seen, ["/owner/admin/v2/namespaces/t/ns/0x0_0x1/split"])

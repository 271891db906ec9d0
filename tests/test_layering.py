"""
The layering of REDESIGN.md section 2 holds for every import (``testing.layering``), importing
the broker service loads no Pulsar client module, and no broker class passes 500 lines.
"""

import os
import subprocess
import sys
import textwrap

from twisted.trial import unittest

from pulsar_twisted.testing import layering

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
MAX_BROKER_CLASS_LINES = 500


class LayeringTests(unittest.TestCase):
    def test_imports_follow_the_layering(self):
        """No import (module level or inside a function) goes up or sideways in the layering."""
        found = layering.violations(ROOT)
        if found:
            self.fail(f"{len(found)} imports break the layering:\n"
                      + "\n".join(layering.describe(i) for i in found))

    def test_broker_service_loads_no_client_module(self):
        """Importing pulsar_twisted.broker.service (in a fresh interpreter) loads no client module."""
        code = ("import sys, pulsar_twisted.broker.service\n"
                "print('\\n'.join(sorted(m for m in sys.modules if m.startswith('pulsar_twisted.client'))))")
        env = dict(os.environ, PYTHONPATH=ROOT)
        loaded = subprocess.run([sys.executable, "-c", code], cwd=ROOT, env=env, capture_output=True,
                                text=True, timeout=60, check=True).stdout.split()
        self.assertEqual(loaded, [])

    def test_no_broker_class_over_500_lines(self):
        """No class under pulsar_twisted/broker/ is longer than 500 lines."""
        big = [c for c in layering.class_sizes(ROOT, os.path.join("pulsar_twisted", "broker"))
               if c.lines > MAX_BROKER_CLASS_LINES]
        self.assertEqual([f"{c.path}:{c.line} {c.name} ({c.lines} lines)" for c in big], [])


class WalkerTests(unittest.TestCase):
    """The walker itself, on a small tree written for the test."""

    def setUp(self):
        self.root = self.mktemp()
        files = {
            "pulsar_twisted/__init__.py": "",
            "pulsar_twisted/config.py": "",
            "pulsar_twisted/common/__init__.py": "from . import naming\n",
            "pulsar_twisted/common/naming.py": "from pulsar_twisted import config\n",
            "pulsar_twisted/wire/__init__.py": "",
            "pulsar_twisted/wire/frames.py": """
                from ..common import naming
                def later():
                    from pulsar_twisted.broker import topic
                    import importlib
                    importlib.import_module("pulsar_twisted.mledger.ledger")
            """,
            "pulsar_twisted/broker/__init__.py": "",
            "pulsar_twisted/broker/topic.py": """
                import pulsar_twisted.wire.frames
                from pulsar_twisted.client import message
                from . import dispatch
                class Topic:
                    def f(self):
                        from .. import web
            """,
            "pulsar_twisted/bookie/__init__.py": "from pulsar_twisted.ledger import client\n",
            "pulsar_twisted/client/__init__.py": "from pulsar_twisted.wire import frames\n",
            "pulsar_twisted/testing/__init__.py": "from pulsar_twisted.broker import topic\n",
        }
        for name, text in files.items():
            path = os.path.join(self.root, name)
            os.makedirs(os.path.dirname(path), exist_ok=True)
            with open(path, "w") as f:
                f.write(textwrap.dedent(text))

    def test_relative_and_function_level_imports_resolved(self):
        """Relative imports resolve against the package; imports inside functions are found."""
        found = {(i.importer, i.target, i.in_function) for i in layering.all_imports(self.root)}
        self.assertIn(("pulsar_twisted.common", "pulsar_twisted.common.naming", False), found)
        self.assertIn(("pulsar_twisted.wire.frames", "pulsar_twisted.common.naming", False), found)
        self.assertIn(("pulsar_twisted.wire.frames", "pulsar_twisted.broker.topic", True), found)
        self.assertIn(("pulsar_twisted.wire.frames", "pulsar_twisted.mledger.ledger", True), found)
        self.assertIn(("pulsar_twisted.broker.topic", "pulsar_twisted.broker.dispatch", False), found)
        self.assertIn(("pulsar_twisted.broker.topic", "pulsar_twisted.web", True), found)

    def test_violations_named_by_file_and_line(self):
        """Upward, sibling and client imports are reported with file and line; allowed ones are not."""
        found = [layering.describe(i) for i in layering.violations(self.root)]
        frames = os.path.join("pulsar_twisted", "wire", "frames.py")
        topic = os.path.join("pulsar_twisted", "broker", "topic.py")
        bookie = os.path.join("pulsar_twisted", "bookie", "__init__.py")
        self.assertEqual(sorted(f.split(" (")[0] for f in found), sorted([
            f"{frames}:4: wire -> broker", f"{frames}:6: wire -> mledger",
            f"{topic}:3: broker -> client", f"{topic}:7: broker -> web",
            f"{bookie}:1: bookie -> ledger"]))

    def test_cycles(self):
        """Strongly connected components of the subpackage graph, counting function-level imports."""
        graph = layering.layer_graph(layering.all_imports(self.root))
        cycles = [c for c in layering.strongly_connected(graph) if len(c) > 1]
        self.assertEqual(cycles, [["broker", "client", "wire"]])

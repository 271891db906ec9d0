"""Packaging facts a developer relies on: an editable install lets twistd find the plugins."""

import configparser
import os

from twisted.trial import unittest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


class EditableInstallTests(unittest.SynchronousTestCase):
    def test_editable_mode_is_compat(self):
        """setup.cfg asks setuptools for the "compat" editable mode: the checkout goes on sys.path,
        which is where twistd's plugin discovery (twisted.plugins.__path__) looks for
        twisted/plugins/; the default import-hook mode hides the plugins (issue 13, item 14)."""
        parser = configparser.ConfigParser()
        parser.read(os.path.join(ROOT, "setup.cfg"))
        self.assertEqual(parser["editable_wheel"]["mode"].strip(), "compat")
        plugins = os.path.join(ROOT, "twisted", "plugins")
        self.assertFalse(os.path.exists(os.path.join(plugins, "__init__.py")))
        self.assertIn("pulsar_standalone.py", os.listdir(plugins))

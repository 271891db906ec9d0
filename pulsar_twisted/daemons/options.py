"""
twistd command-line options shared by the daemons: ``--config FILE`` (``-c``), loaded and checked
while twistd parses options, so that a bad file stops start-up with twistd's plain usage error
naming the key, before any service starts.
"""

import os

from twisted.python import usage

from pulsar_twisted.config import ConfigError


def config_options(config_class, check=None, what: str = "Pulsar"):
    """An Options class whose ``config`` attribute is a ``config_class`` after parsing."""

    class Options(usage.Options):
        optParameters = [
            ["config", "c", None, f"Configuration file ({what} key=value format)."],
        ]

        def postOptions(self):
            path = self["config"]
            if path is not None and not os.path.exists(path):
                raise usage.UsageError(f"configuration file {path} does not exist")
            try:
                self.config = config_class.from_file(path) if path else config_class()
                if check is not None:
                    check(self.config)
            except ConfigError as e:
                raise usage.UsageError(str(e))

    Options.__name__ = f"{config_class.__name__}Options"
    return Options

"""``python -m pulsar_twisted.cli.admin``: the pulsar-admin command line."""

import sys

from pulsar_twisted.cli.admin import main

sys.exit(main())

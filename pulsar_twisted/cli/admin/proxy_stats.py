"""
``pulsar-admin proxy-stats``: connections and topics of a Pulsar proxy (``/proxy-stats/...`` on the
proxy's web service: point ``--admin-url`` at the proxy), printed as Pulsar does (Gson: compact,
or pretty with ``-i``).
"""

import json


def _gson(value, indent: bool) -> str:
    return json.dumps(value, indent=2) if indent else json.dumps(value, separators=(",", ":"))


def add(sub) -> None:
    p = sub.add_parser("connections", help="dump connections metrics for Monitoring")
    p.add_argument("-i", "--indent", action="store_true", help="Indent JSON output")
    p.set_defaults(run=lambda a, c: _gson(c.get("/proxy-stats/connections"), a.indent))
    p = sub.add_parser("topics", help="dump topics metrics for Monitoring")
    p.add_argument("-i", "--indent", action="store_true", help="Indent JSON output")
    p.set_defaults(run=lambda a, c: _gson(c.get("/proxy-stats/topics"), a.indent))

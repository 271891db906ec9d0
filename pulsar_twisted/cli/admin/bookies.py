"""
``pulsar-admin bookies``: racks-placement, list-bookies, get-bookie-rack, set-bookie-rack and
delete-bookie-rack, Pulsar's verbs and flags over ``/admin/v2/bookies``.
"""

from pulsar_twisted.cli.admin import V2, CommandError, _q

_BOOKIE = (("-b", "--bookie"), {"required": True, "help": "Bookie address (format: address:port)"})


def _set_rack(a, c):
    if not a.rack or a.rack.strip() == "/":
        raise CommandError("rack name is invalid, it should not be null, empty or '/'")
    body = {"rack": a.rack}
    if a.hostname:
        body["hostname"] = a.hostname
    c.post(f"{V2}/bookies/racks-info/{_q(a.bookie)}", body, query={"group": a.group})


def add(sub) -> None:
    p = sub.add_parser("racks-placement", help="Rack placement of every bookie in the cluster")
    p.set_defaults(run=lambda a, c: c.get(f"{V2}/bookies/racks-info"))
    p = sub.add_parser("list-bookies", help="List bookies")
    p.set_defaults(run=lambda a, c: c.get(f"{V2}/bookies/all"))
    p = sub.add_parser("get-bookie-rack", help="Rack placement of one bookie")
    p.add_argument(*_BOOKIE[0], **_BOOKIE[1])
    p.set_defaults(run=lambda a, c: c.get(f"{V2}/bookies/racks-info/{_q(a.bookie)}"))
    p = sub.add_parser("delete-bookie-rack", help="Remove the rack placement of a bookie")
    p.add_argument(*_BOOKIE[0], **_BOOKIE[1])
    p.set_defaults(run=lambda a, c: c.delete(f"{V2}/bookies/racks-info/{_q(a.bookie)}"))
    p = sub.add_parser("set-bookie-rack", help="Update the rack placement of a bookie")
    p.add_argument(*_BOOKIE[0], **_BOOKIE[1])
    p.add_argument("-r", "--rack", required=True, help="Bookie rack name")
    p.add_argument("-g", "--group", default="default", help="Bookie group name")
    p.add_argument("--hostname", help="Bookie host name")
    p.set_defaults(run=_set_rack)

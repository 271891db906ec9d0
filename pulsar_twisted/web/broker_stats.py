"""
Routes of ``/admin/v2/broker-stats`` (``topics``, ``metrics``, ``load-report``, our
``load-decisions``) and
``/admin/v2/bookies`` (``all``, ``racks-info``), over ``broker.admin.broker_stats`` and
``broker.admin.bookies``. Pulsar's JVM views (``mbeans``, ``allocator-stats``) are not routed, so
they answer 404 as any unknown path.
"""

import json

from pulsar_twisted.broker.admin import base
from pulsar_twisted.broker.admin.bookies import BookiesAdmin
from pulsar_twisted.broker.admin.broker_stats import BrokerStatsAdmin
from pulsar_twisted.web.openapi import Operation
from pulsar_twisted.web.routing import Response, json_body, query

V2 = "/admin/v2"

_OBJECT = {"type": "object", "additionalProperties": True}
_BOOKIE_INFO = {"type": "object", "properties": {"rack": {"type": "string"},
                                                 "hostname": {"type": "string"}},
                "additionalProperties": True}
_RACKS = {"type": "object", "additionalProperties": {"type": "object",
                                                     "additionalProperties": _BOOKIE_INFO}}
_BOOKIES = {"type": "object", "properties": {"bookies": {"type": "array", "items": {
    "type": "object", "properties": {"bookieId": {"type": "string"}}}}}}
_METRICS = {"type": "array", "items": {"type": "object", "properties": {
    "metrics": _OBJECT, "dimensions": {"type": "object", "additionalProperties": {"type": "string"}}}}}


class _Lazy:
    """The admin area ``make()`` builds on first use: the routing table may be built before (and
    without) a live AdminService, as the OpenAPI document's tests do."""

    def __init__(self, make):
        self._make = make
        self._area = None

    def __getattr__(self, name):
        if self._area is None:
            self._area = self._make()
        return getattr(self._area, name)


async def json_chunks(value, clock, levels: int) -> list:
    """``value`` as JSON in bytes chunks, for a ``Response`` list body: the dicts of the first
    ``levels`` levels written here, each value below them with the C encoder, one chunk per
    ``base.SLICE_TOPICS`` of those values and a reactor turn between chunks (the stats of 100k
    topics are never encoded in one callback). Parses as ``json.dumps(value)`` would. ``value``
    is consumed: each encoded value is dropped from its dict, so the stats are freed as they go
    (not all at once after the last chunk)."""
    out, pending, count = [], [], [0]

    async def write(node, depth):
        if depth == levels or not isinstance(node, dict):
            pending.append(json.dumps(node))
            count[0] += 1
            if count[0] % base.SLICE_TOPICS == 0:
                out.append("".join(pending).encode())
                pending.clear()
                await base.next_turn(clock)
            return
        pending.append("{")
        for i, (key, child) in enumerate(list(node.items())):
            pending.append(("," if i else "") + json.dumps(str(key)) + ":")
            node[key] = None
            await write(child, depth + 1)
        pending.append("}")

    await write(value, 0)
    out.append("".join(pending).encode())
    return out


def add_broker_stats_routes(router, admin) -> None:
    stats = _Lazy(lambda: BrokerStatsAdmin(admin.context, admin.stats, admin.brokers))

    async def topics(request):
        # namespace -> bundle -> domain -> topic -> TopicStats: encoded per topic.
        chunks = await json_chunks(await stats.topics(), admin.clock, levels=4)
        return Response(200, chunks)

    router.add("GET", f"{V2}/broker-stats/topics", topics,
               doc=Operation("Stats of the topics loaded here, by namespace and bundle",
                             "broker-stats", {200: _OBJECT}))
    router.add("GET", f"{V2}/broker-stats/metrics", lambda request: stats.metrics(),
               doc=Operation("Dimension metrics per namespace", "broker-stats", {200: _METRICS}))
    router.add("GET", f"{V2}/broker-stats/load-report", lambda request: stats.load_report(),
               doc=Operation("This broker's load report (LocalBrokerData)", "broker-stats",
                             {200: _OBJECT}))
    # Beyond Pulsar (issue 15): the load manager's decisions log (broker/loadbalance/decisions.py).
    router.add("GET", f"{V2}/broker-stats/load-decisions",
               lambda request: admin.load_decisions(query(request, "kind", "") or ""),
               doc=Operation("The load manager's placement, split, unload and shed decisions, with "
                             "their reasons", "broker-stats", {200: {"type": "array", "items": _OBJECT}},
                             query={"kind": {"type": "string"}}))


def add_bookie_routes(router, admin) -> None:
    bookies = _Lazy(lambda: BookiesAdmin(admin.context))
    base = f"{V2}/bookies"

    def group_of(request) -> str:
        values = request.args.get(b"group") or [b"default"]
        return values[0].decode("utf-8", "replace") or "default"

    router.add("GET", f"{base}/all", lambda request: bookies.all_bookies(),
               doc=Operation("Registered bookies", "bookies", {200: _BOOKIES}))
    router.add("GET", f"{base}/racks-info", lambda request: bookies.racks_info(),
               doc=Operation("Rack placement of every bookie, by group", "bookies", {200: _RACKS}))
    router.add("GET", f"{base}/racks-info/{{bookie}}", lambda request, bookie: bookies.rack_of(bookie),
               doc=Operation("Rack placement of one bookie", "bookies", {200: _BOOKIE_INFO}))
    router.add("POST", f"{base}/racks-info/{{bookie}}", lambda request, bookie: bookies.set_rack(
        bookie, group_of(request), json_body(request)),
        doc=Operation("Place a bookie in a rack", "bookies", body=_BOOKIE_INFO,
                      query={"group": {"type": "string"}}))
    router.add("DELETE", f"{base}/racks-info/{{bookie}}",
               lambda request, bookie: bookies.delete_rack(bookie),
               doc=Operation("Remove a bookie's rack placement", "bookies"))

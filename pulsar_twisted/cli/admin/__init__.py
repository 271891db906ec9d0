"""
``pulsar-admin``: Pulsar's admin command line over the admin REST API v2, with Pulsar's verbs,
flags and output (pretty JSON for objects as Jackson prints them, one item per line for lists,
``HTTP 404 Not Found`` and the server's reason on stderr with exit code 1 for errors).

The admin URL is ``--admin-url``, else ``webServiceUrl`` of the client configuration (the file
named by ``PULSAR_CLIENT_CONF``, else ``conf/client.conf`` when it exists), else
``http://localhost:8080``. A plain blocking script: one HTTP request per call (urllib), no reactor.

Families: ``clusters``, ``tenants``, ``namespaces``, ``topics``, ``brokers`` (this module), and
``schemas``, ``broker-stats``, ``bookies``, ``proxy-stats``, ``functions``, ``sources``, ``sinks``
(one module each in this package, using the helpers here); ``pulsar-admin topics --help`` lists a family's verbs.
"""

import argparse
import json
import os
import re
import sys
import time
import urllib.error
import urllib.parse
import urllib.request
from http import HTTPStatus

DEFAULT_ADMIN_URL = "http://localhost:8080"


class CommandError(Exception):
    """A user error or a failed request: printed on stderr, exit code 1."""


class HttpError(CommandError):
    def __init__(self, status: int, reason: str):
        self.status = status
        self.reason = reason
        try:
            phrase = HTTPStatus(status).phrase
        except ValueError:
            phrase = ""
        super().__init__(f"HTTP {status} {phrase}".rstrip() + f"\n\nReason: {reason}")


# ------------------------------------------------------------------------------------ units
_TIME_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 604800, "y": 31536000}
_SIZE_UNITS = {"k": 1024, "m": 1024 ** 2, "g": 1024 ** 3, "t": 1024 ** 4}


def parse_seconds(text: str) -> int:
    """Pulsar's relative time: ``"30"`` (seconds), ``"10m"``, ``"3h"``, ``"2d"``, ``"5w"``, ``"1y"``;
    ``"-1"`` stays -1 (infinite)."""
    match = re.fullmatch(r"\s*(-?\d+)\s*([smhdwy]?)\s*", str(text), re.IGNORECASE)
    if not match:
        raise CommandError(f"Invalid time '{text}': use a number with an optional unit s, m, h, d, w, y")
    value = int(match.group(1))
    if value < 0:
        if value != -1:
            raise CommandError(f"Invalid time '{text}': only -1 (infinite) may be negative")
        return -1
    return value * _TIME_UNITS[(match.group(2) or "s").lower()]


def parse_bytes(text: str) -> int:
    """Pulsar's size: ``"1024"`` (bytes), ``"10K"``, ``"10M"``, ``"10G"``, ``"1T"``; ``"-1"`` is -1."""
    match = re.fullmatch(r"\s*(-?\d+)\s*([kmgt]?)\s*", str(text), re.IGNORECASE)
    if not match:
        raise CommandError(f"Invalid size '{text}': use a number with an optional unit K, M, G, T")
    value = int(match.group(1))
    if value < 0:
        if value != -1:
            raise CommandError(f"Invalid size '{text}': only -1 (infinite) may be negative")
        return -1
    return value * _SIZE_UNITS.get((match.group(2) or "").lower(), 1)


def parse_message_id(text: str) -> dict:
    """``"ledgerId:entryId"`` (Pulsar's ``-m`` argument) as the REST API's MessageId object."""
    match = re.fullmatch(r"\s*(-?\d+):(-?\d+)(?::(-?\d+))?\s*", text or "")
    if not match:
        raise CommandError(f"Invalid message id '{text}': use ledgerId:entryId")
    out = {"ledgerId": int(match.group(1)), "entryId": int(match.group(2))}
    if match.group(3) is not None:
        out["partitionIndex"] = int(match.group(3))
    return out


# ------------------------------------------------------------------------------------ output
def jackson(value, indent: int = 0) -> str:
    """JSON as Pulsar's CLI prints it (Jackson's default pretty printer: ``"key" : value``,
    arrays on one line, ``{ }`` and ``[ ]`` when empty). Still valid JSON."""
    pad = "  " * indent
    if isinstance(value, dict):
        if not value:
            return "{ }"
        items = [f'{pad}  {json.dumps(str(k))} : {jackson(v, indent + 1)}' for k, v in value.items()]
        return "{\n" + ",\n".join(items) + f"\n{pad}}}"
    if isinstance(value, list):
        if not value:
            return "[ ]"
        return "[ " + ", ".join(jackson(v, indent) for v in value) + " ]"
    return json.dumps(value)


def print_result(value, out) -> None:
    """Lists one item per line, strings as they are, anything else as pretty JSON."""
    if isinstance(value, list) and all(isinstance(v, str) for v in value):
        for item in value:
            out.write(f"{item}\n")
    elif isinstance(value, str):
        out.write(f"{value}\n")
    else:
        out.write(jackson(value) + "\n")


def hex_dump(data: bytes) -> str:
    """Netty's ``prettyHexDump`` layout, which ``pulsar-admin topics peek-messages`` prints."""
    lines = ["         +-------------------------------------------------+",
             "         |  0  1  2  3  4  5  6  7  8  9  a  b  c  d  e  f |",
             "+--------+-------------------------------------------------+----------------+"]
    for offset in range(0, len(data), 16):
        row = data[offset:offset + 16]
        hexes = " ".join(f"{b:02x}" for b in row).ljust(47)
        text = "".join(chr(b) if 32 <= b < 127 else "." for b in row).ljust(16)
        lines.append(f"|{offset:08x}| {hexes} |{text}|")
    lines.append(lines[2])
    return "\n".join(lines)


# ------------------------------------------------------------------------------------ HTTP
_MAX_REDIRECTS = 5


class AdminClient:
    """One blocking call per admin request; HttpError for any non-2xx answer."""

    def __init__(self, admin_url: str, timeout: float = 60.0):
        self.base = admin_url.rstrip("/")
        self.timeout = timeout

    def request(self, method: str, path: str, body=None, query=None, raw: bool = False,
                form=None):
        """The parsed JSON answer (None for 204/empty); ``raw`` gives ``(headers, bytes)``;
        ``form`` ``(bytes, content_type)`` sends that body instead of ``body`` as JSON."""
        url = self.base + path
        if query:
            url += "?" + urllib.parse.urlencode({k: v for k, v in query.items() if v is not None})
        data = json.dumps(body).encode() if body is not None else None
        headers = {"Accept": "application/json"}
        if form is not None:
            data, headers["Content-Type"] = form
        elif data is not None:
            headers["Content-Type"] = "application/json"
        try:
            for _ in range(_MAX_REDIRECTS):
                req = urllib.request.Request(url, data=data, method=method, headers=headers)
                try:
                    with urllib.request.urlopen(req, timeout=self.timeout) as response:
                        content = response.read()
                        if raw:
                            return dict(response.headers.items()), content
                    break
                except urllib.error.HTTPError as e:
                    # The owner of a bundle or topic answers (Pulsar's 307 from another broker);
                    # urllib follows 307/308 only for GET and HEAD.
                    location = e.headers.get("Location") if e.code in (307, 308) else None
                    if not location:
                        raise
                    url = urllib.parse.urljoin(url, location)
            else:
                raise CommandError(f"Too many redirects from {self.base}{path}")
        except urllib.error.HTTPError as e:
            content = e.read()
            try:
                reason = json.loads(content).get("reason") or e.reason
            except (ValueError, AttributeError):
                reason = content.decode("utf-8", "replace").strip() or e.reason
            raise HttpError(e.code, reason)
        except (urllib.error.URLError, OSError) as e:
            reason = getattr(e, "reason", e)
            raise CommandError(f"Failed to reach {self.base}: {reason}")
        if not content.strip():
            return None
        try:
            return json.loads(content)
        except ValueError:
            return content.decode("utf-8", "replace")

    def get(self, path, **kw):
        return self.request("GET", path, **kw)

    def put(self, path, body=None, **kw):
        return self.request("PUT", path, body, **kw)

    def post(self, path, body=None, **kw):
        return self.request("POST", path, body, **kw)

    def delete(self, path, **kw):
        return self.request("DELETE", path, **kw)


def _q(segment: str) -> str:
    return urllib.parse.quote(segment, safe="")


def namespace_path(text: str) -> str:
    """``tenant/namespace`` -> ``/tenant/namespace`` (each part URL-encoded)."""
    parts = (text or "").split("/")
    if len(parts) != 2 or not all(parts):
        raise CommandError(f"Invalid namespace name '{text}': expected tenant/namespace")
    return f"/{_q(parts[0])}/{_q(parts[1])}"


def topic_path(text: str) -> str:
    """Pulsar's short names: ``t`` -> persistent://public/default/t, ``tn/ns/t`` -> persistent://...;
    the path ``/{domain}/{tenant}/{namespace}/{topic}`` of the full name."""
    text = text or ""
    domain, sep, rest = text.partition("://")
    if not sep:
        domain, rest = "persistent", text
        if "/" not in rest:
            rest = f"public/default/{rest}"
    if domain not in ("persistent", "non-persistent"):
        raise CommandError(f"Invalid topic name '{text}': the domain is persistent or non-persistent")
    parts = rest.split("/", 2)
    if len(parts) != 3 or not all(parts):
        raise CommandError(f"Invalid topic name '{text}'")
    return f"/{domain}/" + "/".join(_q(p) for p in parts)


def _csv(text):
    return [v.strip() for v in (text or "").split(",") if v.strip()]


# ------------------------------------------------------------------------------------ commands
V2 = "/admin/v2"


def _clusters(sub):
    p = sub.add_parser("list", help="List clusters")
    p.set_defaults(run=lambda a, c: c.get(f"{V2}/clusters"))
    p = sub.add_parser("get", help="Configuration of a cluster")
    p.add_argument("cluster")
    p.set_defaults(run=lambda a, c: c.get(f"{V2}/clusters/{_q(a.cluster)}"))
    for verb, method in (("create", "put"), ("update", "post")):
        p = sub.add_parser(verb, help=f"{verb.capitalize()} a cluster")
        p.add_argument("cluster")
        p.add_argument("--url", help="service-url (http://host:8080)")
        p.add_argument("--url-secure", help="service-url for secure connection")
        p.add_argument("--broker-url", help="broker-service-url (pulsar://host:6650)")
        p.add_argument("--broker-url-secure", help="broker-service-url for secure connection")
        p.set_defaults(run=lambda a, c, m=method: getattr(c, m)(
            f"{V2}/clusters/{_q(a.cluster)}", {k: v for k, v in (
                ("serviceUrl", a.url), ("serviceUrlTls", a.url_secure),
                ("brokerServiceUrl", a.broker_url), ("brokerServiceUrlTls", a.broker_url_secure))
                if v is not None}))
    p = sub.add_parser("delete", help="Delete a cluster")
    p.add_argument("cluster")
    p.set_defaults(run=lambda a, c: c.delete(f"{V2}/clusters/{_q(a.cluster)}"))


def _tenants(sub):
    p = sub.add_parser("list", help="List tenants")
    p.set_defaults(run=lambda a, c: c.get(f"{V2}/tenants"))
    p = sub.add_parser("get", help="Admin roles and allowed clusters of a tenant")
    p.add_argument("tenant")
    p.set_defaults(run=lambda a, c: c.get(f"{V2}/tenants/{_q(a.tenant)}"))
    for verb, method in (("create", "put"), ("update", "post")):
        p = sub.add_parser(verb, help=f"{verb.capitalize()} a tenant")
        p.add_argument("tenant")
        p.add_argument("-r", "--admin-roles", default="", help="comma-separated admin roles")
        p.add_argument("-c", "--allowed-clusters", default=None,
                       help="comma-separated clusters (default: all clusters on create)")
        p.set_defaults(run=lambda a, c, m=method: _put_tenant(a, c, m))
    p = sub.add_parser("delete", help="Delete a tenant")
    p.add_argument("tenant")
    p.add_argument("-f", "--force", action="store_true", help="delete its namespaces too")
    p.set_defaults(run=lambda a, c: c.delete(f"{V2}/tenants/{_q(a.tenant)}",
                                             query={"force": "true"} if a.force else None))


def _put_tenant(a, c, method):
    clusters = _csv(a.allowed_clusters) if a.allowed_clusters is not None else None
    if clusters is None:
        # Pulsar's CLI defaults to every cluster on create; on update it keeps the current ones.
        clusters = (c.get(f"{V2}/clusters") if method == "put"
                    else c.get(f"{V2}/tenants/{_q(a.tenant)}").get("allowedClusters", []))
    body = {"adminRoles": _csv(a.admin_roles), "allowedClusters": clusters}
    return getattr(c, method)(f"{V2}/tenants/{_q(a.tenant)}", body)


def _namespaces(sub):
    def ns(name, help, run, *args):
        p = sub.add_parser(name, help=help)
        p.add_argument("namespace", metavar="tenant/namespace")
        for flags, kwargs in args:
            p.add_argument(*flags, **kwargs)
        p.set_defaults(run=lambda a, c: run(a, c, f"{V2}/namespaces" + namespace_path(a.namespace)))
        return p

    p = sub.add_parser("list", help="Namespaces of a tenant")
    p.add_argument("tenant")
    p.set_defaults(run=lambda a, c: c.get(f"{V2}/namespaces/{_q(a.tenant)}"))
    ns("create", "Create a namespace", _create_namespace,
       (("-b", "--bundles"), {"type": int, "help": "number of bundles"}),
       (("-c", "--clusters"), {"help": "comma-separated replication clusters"}))
    ns("delete", "Delete a namespace",
       lambda a, c, p: c.delete(p, query={"force": "true"} if a.force else None),
       (("-f", "--force"), {"action": "store_true"}))
    ns("policies", "Policies of a namespace", lambda a, c, p: c.get(p))
    ns("set-clusters", "Set the replication clusters of a namespace",
       lambda a, c, p: c.post(p + "/replication", _csv(a.clusters)),
       (("-c", "--clusters"), {"required": True, "help": "comma-separated cluster names"}))
    ns("get-clusters", "Replication clusters of a namespace",
       lambda a, c, p: c.get(p + "/replication"))
    ns("unload", "Unload a namespace, or one of its bundles",
       lambda a, c, p: c.put(p + (f"/{_q(a.bundle)}" if a.bundle else "") + "/unload"),
       (("-b", "--bundle"), {"help": "{start}_{end}, e.g. 0x00000000_0x40000000"}))
    ns("split-bundle", "Split a namespace bundle in two", lambda a, c, p: c.put(
        p + f"/{_q(a.bundle)}/split",
        query={"unload": "true" if a.unload else "false",
               "splitAlgorithmName": a.split_algorithm_name}),
       (("-b", "--bundle"), {"required": True, "help": "{start}_{end}"}),
       (("-u", "--unload"), {"action": "store_true", "help": "unload the halves"}),
       (("--split-algorithm-name",), {"choices": ["range_equally_divide", "topic_count_equally_divide"],
                                      "default": None}))
    ns("topics", "Topics of a namespace", lambda a, c, p: c.get(p + "/topics"))
    ns("set-retention", "Set the retention policy", lambda a, c, p: c.post(p + "/retention", {
        "retentionTimeInMinutes": _minutes(parse_seconds(a.time)),
        "retentionSizeInMB": _megabytes(parse_bytes(a.size))}),
       (("-s", "--size"), {"required": True, "help": "10M, 16G, 3T (-1: infinite)"}),
       (("-t", "--time"), {"required": True, "help": "100m, 3h, 2d, 5w (-1: infinite)"}))
    ns("get-retention", "Retention policy", lambda a, c, p: c.get(p + "/retention"))
    ns("remove-retention", "Remove the retention policy", lambda a, c, p: c.delete(p + "/retention"))
    ns("set-message-ttl", "Set the message TTL", lambda a, c, p: c.post(
        p + "/messageTTL", parse_seconds(a.messageTTL)),
       (("-ttl", "--messageTTL"), {"required": True, "help": "seconds, or 1h, 2d, ..."}))
    ns("get-message-ttl", "Message TTL", lambda a, c, p: c.get(p + "/messageTTL"))
    ns("remove-message-ttl", "Remove the message TTL", lambda a, c, p: c.delete(p + "/messageTTL"))
    dedup = ns("set-deduplication", "Enable or disable deduplication",
               lambda a, c, p: c.post(p + "/deduplication", a.enable))
    group = dedup.add_mutually_exclusive_group(required=True)
    group.add_argument("-e", "--enable", action="store_true", dest="enable", default=None)
    group.add_argument("-d", "--disable", action="store_false", dest="enable")
    ns("get-deduplication", "Deduplication", lambda a, c, p: c.get(p + "/deduplication"))
    ns("set-backlog-quota", "Set a backlog quota", _set_backlog_quota,
       (("-l", "--limit"), {"help": "size limit (10M, 16G)"}),
       (("-lt", "--limitTime"), {"help": "time limit (100m, 3h)"}),
       (("-p", "--policy"), {"required": True, "choices": [
           "producer_request_hold", "producer_exception", "consumer_backlog_eviction"]}),
       (("-t", "--type"), {"default": "destination_storage",
                           "choices": ["destination_storage", "message_age"]}))
    ns("get-backlog-quotas", "Backlog quotas", lambda a, c, p: c.get(p + "/backlogQuotaMap"))
    ns("remove-backlog-quota", "Remove a backlog quota", lambda a, c, p: c.delete(
        p + "/backlogQuota", query={"backlogQuotaType": a.type}),
       (("-t", "--type"), {"default": "destination_storage"}))
    ns("grant-permission", "Grant permissions to a role", lambda a, c, p: c.post(
        p + f"/permissions/{_q(a.role)}", _csv(a.actions)),
       (("--role",), {"required": True}),
       (("--actions",), {"required": True, "help": "produce,consume"}))
    ns("revoke-permission", "Revoke a role's permissions", lambda a, c, p: c.delete(
        p + f"/permissions/{_q(a.role)}"), (("--role",), {"required": True}))
    ns("permissions", "Permissions", lambda a, c, p: c.get(p + "/permissions"))
    for what, flag, short in (("producers", "--max-producers-per-topic", "-p"),
                              ("consumers", "--max-consumers-per-topic", "-c")):
        resource = f"/max{what.capitalize()}PerTopic"
        ns(f"set-max-{what}-per-topic", f"Set max {what} per topic",
           lambda a, c, p, r=resource: c.post(p + r, a.value),
           ((short, flag), {"required": True, "type": int, "dest": "value"}))
        ns(f"get-max-{what}-per-topic", f"Max {what} per topic", lambda a, c, p, r=resource: c.get(p + r))
    offload.add_namespace_verbs(ns)


def _minutes(seconds: int) -> int:
    return -1 if seconds == -1 else seconds // 60


def _megabytes(size: int) -> int:
    return -1 if size == -1 else size // (1024 * 1024)


def _create_namespace(a, c, path):
    body = {}
    if a.bundles is not None:
        body["bundles"] = {"numBundles": a.bundles}
    if a.clusters:
        body["replication_clusters"] = _csv(a.clusters)
    return c.put(path, body or None)


def _set_backlog_quota(a, c, path):
    if a.limit is None and a.limitTime is None:
        raise CommandError("set-backlog-quota needs --limit or --limitTime")
    body = {"policy": a.policy,
            "limitSize": parse_bytes(a.limit) if a.limit is not None else -1,
            "limitTime": parse_seconds(a.limitTime) if a.limitTime is not None else -1}
    return c.post(path + "/backlogQuota", body, query={"backlogQuotaType": a.type})


def _topics(sub):
    def topic(name, help, run, *args):
        p = sub.add_parser(name, help=help)
        p.add_argument("topic")
        for flags, kwargs in args:
            p.add_argument(*flags, **kwargs)
        p.set_defaults(run=lambda a, c: run(a, c, V2 + topic_path(a.topic)))
        return p

    sub_arg = (("-s", "--subscription"), {"required": True})
    force = (("-f", "--force"), {"action": "store_true"})

    def forced(a):
        return {"force": "true"} if a.force else None

    p = sub.add_parser("list", help="Topics of a namespace")
    p.add_argument("namespace", metavar="tenant/namespace")
    p.add_argument("-td", "--topic-domain", default="persistent", choices=["persistent", "non-persistent"])
    p.set_defaults(run=lambda a, c: c.get(f"{V2}/{a.topic_domain}" + namespace_path(a.namespace)))
    p = sub.add_parser("list-partitioned-topics", help="Partitioned topics of a namespace")
    p.add_argument("namespace", metavar="tenant/namespace")
    p.set_defaults(run=lambda a, c: c.get(f"{V2}/persistent" + namespace_path(a.namespace) + "/partitioned"))
    topic("create", "Create a non-partitioned topic", lambda a, c, p: c.put(p))
    topic("delete", "Delete a topic", lambda a, c, p: c.delete(p, query=forced(a)), force)
    topic("create-partitioned-topic", "Create a partitioned topic", lambda a, c, p: c.put(
        p + "/partitions", a.partitions), (("-p", "--partitions"), {"required": True, "type": int}))
    topic("update-partitioned-topic", "Add partitions", lambda a, c, p: c.post(
        p + "/partitions", a.partitions), (("-p", "--partitions"), {"required": True, "type": int}))
    topic("get-partitioned-topic-metadata", "Partitions of a topic",
          lambda a, c, p: c.get(p + "/partitions"))
    topic("delete-partitioned-topic", "Delete a partitioned topic",
          lambda a, c, p: c.delete(p + "/partitions", query=forced(a)), force)
    topic("stats", "Topic stats", lambda a, c, p: c.get(p + "/stats"))
    topic("partitioned-stats", "Partitioned-topic stats", lambda a, c, p: c.get(
        p + "/partitioned-stats", query={"perPartition": "true" if a.per_partition else "false"}),
        (("--per-partition",), {"action": "store_true"}))
    topic("stats-internal", "Managed-ledger stats", lambda a, c, p: c.get(p + "/internalStats"))
    topic("subscriptions", "Subscriptions of a topic", lambda a, c, p: c.get(p + "/subscriptions"))
    topic("create-subscription", "Create a subscription", _create_subscription, sub_arg,
          (("-m", "--messageId"), {"default": "latest", "help": "latest, earliest or ledgerId:entryId"}))
    topic("unsubscribe", "Delete a subscription", lambda a, c, p: c.delete(
        p + f"/subscription/{_q(a.subscription)}", query=forced(a)), sub_arg, force)
    topic("skip", "Skip messages", lambda a, c, p: c.post(
        p + f"/subscription/{_q(a.subscription)}/skip/{a.count}"),
        sub_arg, (("-n", "--count"), {"required": True, "type": int}))
    topic("clear-backlog", "Skip every message", lambda a, c, p: c.post(
        p + f"/subscription/{_q(a.subscription)}/skip_all"), sub_arg)
    reset = topic("reset-cursor", "Move a subscription to a time or message id", _reset_cursor, sub_arg)
    group = reset.add_mutually_exclusive_group(required=True)
    group.add_argument("-t", "--time", help="how far back: 100m, 3h, 2d, 5w")
    group.add_argument("-m", "--messageId", help="ledgerId:entryId")
    topic("expire-messages", "Expire messages older than a time", lambda a, c, p: c.post(
        p + f"/subscription/{_q(a.subscription)}/expireMessages/{parse_seconds(a.expireTime)}"),
        sub_arg, (("-t", "--expireTime"), {"required": True, "help": "seconds, or 10m, 3h, ..."}))
    topic("peek-messages", "Peek messages", _peek, sub_arg,
          (("-n", "--count"), {"type": int, "default": 1}))
    topic("last-message-id", "Last message id", lambda a, c, p: c.get(p + "/lastMessageId"))
    topic("set-replicated-subscription-status", "Enable or disable a replicated subscription on a topic",
          _set_replicated_status, (("-s", "--subscription"), {
              "required": True, "help": "Subscription name to enable or disable replication"}),
          (("-e", "--enable"), {"action": "store_true", "help": "Enable replication"}),
          (("-d", "--disable"), {"action": "store_true", "help": "Disable replication"}))
    topic("get-replicated-subscription-status", "Get replicated subscription status on a topic",
          lambda a, c, p: c.get(_persistent(p) + f"/subscription/{_q(a.subscription)}"
                                "/replicatedSubscriptionStatus"), sub_arg)
    topic("unload", "Unload a topic", lambda a, c, p: c.put(p + "/unload"))
    topic("bundle-range", "The namespace bundle a topic belongs to", lambda a, c, p: c.get(p + "/bundle"))
    topic("terminate", "Terminate a topic", _terminate)
    topic("compact", "Trigger compaction", _compact)
    topic("compaction-status", "Compaction status", lambda a, c, p: c.get(p + "/compaction"))
    offload.add_topic_verbs(topic)
    topic_policies.add_topic_verbs(topic)


def _persistent(path: str) -> str:
    """``path`` if it names a persistent topic (Pulsar's validatePersistentTopic), else the CLI's
    error before any request."""
    if not path.startswith(f"{V2}/persistent/"):
        raise CommandError("Need to provide a persistent topic name")
    return path


def _set_replicated_status(a, c, path):
    if a.enable == a.disable:
        raise CommandError("Need to specify either --enable or --disable")
    return c.post(_persistent(path) + f"/subscription/{_q(a.subscription)}/replicatedSubscriptionStatus",
                  a.enable)


def _create_subscription(a, c, path):
    target = a.messageId.strip().lower()
    if target == "latest":
        body = None
    elif target == "earliest":
        body = {"ledgerId": -1, "entryId": -1}
    else:
        body = parse_message_id(a.messageId)
    return c.put(path + f"/subscription/{_q(a.subscription)}", body)


def _reset_cursor(a, c, path):
    base = path + f"/subscription/{_q(a.subscription)}/resetcursor"
    if a.messageId is not None:
        return c.post(base, parse_message_id(a.messageId))
    timestamp = int(time.time() * 1000) - parse_seconds(a.time) * 1000
    return c.post(f"{base}/{timestamp}")


def _peek(a, c, path):
    lines = []
    for n in range(1, a.count + 1):
        try:
            headers, body = c.request("GET", path + f"/subscription/{_q(a.subscription)}/position/{n}",
                                      raw=True)
        except HttpError as e:
            if e.status == 404 and n > 1:
                break   # fewer messages than asked: print those there are
            raise
        # Header names are case-insensitive (and HTTP servers may recase them).
        headers = {k.lower(): v for k, v in headers.items()}
        lines.append(f"Message ID: {headers.get('x-pulsar-message-id', '')}")
        properties = {k[len("x-pulsar-property-"):]: v for k, v in headers.items()
                      if k.startswith("x-pulsar-property-")}
        for name, header in (("Publish time", "x-pulsar-publish-time"), ("Key", "x-pulsar-partition-key"),
                             ("Producer", "x-pulsar-producer-name")):
            if header in headers:
                lines.append(f"{name}: {headers[header]}")
        if properties:
            lines.append("Properties:\n" + jackson(properties))
        lines.append(hex_dump(body))
        lines.append("")
    return "\n".join(lines).rstrip("\n")


def _terminate(a, c, path):
    last = c.post(path + "/terminate")
    return f"Topic {a.topic} successfully terminated at {last['ledgerId']}:{last['entryId']}"


def _compact(a, c, path):
    c.put(path + "/compaction")
    return f"Topic compaction requested for {a.topic}"


def _brokers(sub):
    p = sub.add_parser("list", help="Active brokers of a cluster")
    p.add_argument("cluster")
    p.set_defaults(run=lambda a, c: c.get(f"{V2}/brokers/{_q(a.cluster)}"))
    p = sub.add_parser("healthcheck", help="Run a health check on the broker")
    p.set_defaults(run=lambda a, c: c.get(f"{V2}/brokers/health"))
    p = sub.add_parser("leader-broker", help="The leader broker")
    p.set_defaults(run=lambda a, c: c.get(f"{V2}/brokers/leaderBroker"))


# The group modules use the helpers above, so they are imported once those exist.
from pulsar_twisted.cli.admin import bookies, broker_stats, functions, proxy_stats, schemas  # noqa: E402
from pulsar_twisted.cli.admin import io, offload, topic_policies  # noqa: E402

FAMILIES = {"clusters": _clusters, "tenants": _tenants, "namespaces": _namespaces, "topics": _topics,
            "brokers": _brokers, "schemas": schemas.add, "broker-stats": broker_stats.add,
            "bookies": bookies.add, "proxy-stats": proxy_stats.add, "functions": functions.add,
            "sources": io.add_sources, "sinks": io.add_sinks}


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="pulsar-admin", description="Administer a Pulsar cluster.")
    parser.add_argument("--admin-url", help="Admin service URL (default: webServiceUrl of "
                                            "conf/client.conf, else http://localhost:8080)")
    parser.add_argument("--request-timeout", type=float, default=60.0, help="seconds")
    families = parser.add_subparsers(dest="family", metavar="{" + ",".join(FAMILIES) + "}")
    families.required = True
    for name, add in FAMILIES.items():
        family = families.add_parser(name, help=f"Operations on {name}")
        verbs = family.add_subparsers(dest="verb")
        verbs.required = True
        add(verbs)
    return parser


def client_conf_url(environ=os.environ, cwd: str = None) -> str:
    """``webServiceUrl`` of the client configuration (PULSAR_CLIENT_CONF, else conf/client.conf),
    or None."""
    path = environ.get("PULSAR_CLIENT_CONF") or os.path.join(cwd or os.getcwd(), "conf", "client.conf")
    try:
        with open(path) as f:
            for line in f:
                key, sep, value = line.strip().partition("=")
                if sep and key.strip() == "webServiceUrl" and value.strip():
                    return value.strip()
    except OSError:
        pass
    return None


def main(argv=None, out=None, err=None) -> int:
    """Run one command: 0 on success, 1 on any error (printed on ``err``)."""
    out = out or sys.stdout
    err = err or sys.stderr
    args = build_parser().parse_args(argv)
    url = args.admin_url or client_conf_url() or DEFAULT_ADMIN_URL
    try:
        result = args.run(args, AdminClient(url, timeout=args.request_timeout))
    except CommandError as e:
        err.write(f"{e}\n")
        return 1
    if result is not None:
        print_result(result, out)
    elif args.verb.startswith("get-"):
        out.write("null\n")   # an unset policy (204), as Pulsar prints a null value
    return 0


if __name__ == "__main__":
    sys.exit(main())

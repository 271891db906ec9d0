"""
Routes of /admin/v2/{persistent,non-persistent} (topics, partitions, stats, subscriptions) and
/lookup/v2 (HTTP lookup, which the official client uses with an ``http://`` service URL together
with ``.../partitions`` and ``/admin/v2/namespaces/{t}/{ns}/topics``).

Handlers parse and call AdminService; the rules live in ``pulsar_twisted.broker.admin``.
"""

from urllib.parse import urlencode

from pulsar_twisted.broker.admin.brokers import LookupRedirect
from pulsar_twisted.common.naming import NON_PERSISTENT, PERSISTENT
from pulsar_twisted.web.routing import Response, int_param, json_body, query, query_bool
from pulsar_twisted.web.schemas import add_schema_routes

V2 = "/admin/v2"


def _for_domains(router, method: str, template: str, handler) -> None:
    """Register ``handler(request, domain=..., **params)`` under both topic domains (literal, so
    that ``/admin/v2/namespaces/...`` never reads as a domain)."""
    for domain in (PERSISTENT, NON_PERSISTENT):
        def bound(request, _domain=domain, **params):
            return handler(request, _domain, **params)
        router.add(method, template.replace("{domain}", domain), bound)


def add_topic_routes(router, admin) -> None:
    ns = f"{V2}/{{domain}}/{{tenant}}/{{namespace}}"
    topic = f"{ns}/{{topic}}"
    sub = f"{topic}/subscription/{{sub}}"

    def name(domain, tenant, namespace, topic):
        return admin.topic_name(domain, tenant, namespace, topic)

    def add(method, template):
        def register(handler):
            _for_domains(router, method, template, handler)
            return handler
        return register

    # -- listing
    @add("GET", ns)
    def list_topics(request, domain, tenant, namespace):
        return admin.list_topics(domain, tenant, namespace)

    @add("GET", f"{ns}/partitioned")
    def list_partitioned(request, domain, tenant, namespace):
        return admin.list_partitioned_topics(domain, tenant, namespace)

    # -- topics
    @add("PUT", topic)
    def create(request, domain, tenant, namespace, topic):
        return admin.create_topic(name(domain, tenant, namespace, topic))

    @add("DELETE", topic)
    def delete(request, domain, tenant, namespace, topic):
        return admin.delete_topic(name(domain, tenant, namespace, topic), force=query_bool(request, "force"))

    # -- partitioned topics
    @add("PUT", f"{topic}/partitions")
    def create_partitioned(request, domain, tenant, namespace, topic):
        return admin.create_partitioned_topic(name(domain, tenant, namespace, topic), json_body(request),
                                              local_only=query_bool(request, "createLocalTopicOnly"))

    @add("POST", f"{topic}/partitions")
    def update_partitioned(request, domain, tenant, namespace, topic):
        return admin.update_partitioned_topic(name(domain, tenant, namespace, topic), json_body(request))

    @add("GET", f"{topic}/partitions")
    def partitioned_metadata(request, domain, tenant, namespace, topic):
        return admin.get_partitioned_metadata(name(domain, tenant, namespace, topic),
                                              auto_create=query_bool(request, "checkAllowAutoCreation"))

    @add("DELETE", f"{topic}/partitions")
    def delete_partitioned(request, domain, tenant, namespace, topic):
        return admin.delete_partitioned_topic(name(domain, tenant, namespace, topic),
                                              force=query_bool(request, "force"))

    # -- stats
    @add("GET", f"{topic}/stats")
    def stats(request, domain, tenant, namespace, topic):
        return admin.get_topic_stats(name(domain, tenant, namespace, topic))

    @add("GET", f"{topic}/partitioned-stats")
    def partitioned_stats(request, domain, tenant, namespace, topic):
        return admin.get_partitioned_stats(name(domain, tenant, namespace, topic),
                                           per_partition=query_bool(request, "perPartition", True))

    @add("GET", f"{topic}/internalStats")
    def internal_stats(request, domain, tenant, namespace, topic):
        return admin.get_internal_stats(name(domain, tenant, namespace, topic))

    @add("GET", f"{topic}/lastMessageId")
    def last_message_id(request, domain, tenant, namespace, topic):
        return admin.last_message_id(name(domain, tenant, namespace, topic))

    # -- lifecycle
    @add("GET", f"{topic}/bundle")
    def bundle_range(request, domain, tenant, namespace, topic):
        return admin.bundle_range(name(domain, tenant, namespace, topic))

    @add("PUT", f"{topic}/unload")
    def unload(request, domain, tenant, namespace, topic):
        return admin.unload_topic(name(domain, tenant, namespace, topic))

    @add("PUT", f"{topic}/compaction")
    def compact(request, domain, tenant, namespace, topic):
        return admin.compact(name(domain, tenant, namespace, topic))

    @add("GET", f"{topic}/compaction")
    def compaction_status(request, domain, tenant, namespace, topic):
        return admin.compaction_status(name(domain, tenant, namespace, topic))

    @add("PUT", f"{topic}/offload")
    def trigger_offload(request, domain, tenant, namespace, topic):
        return admin.trigger_offload(name(domain, tenant, namespace, topic), json_body(request))

    @add("GET", f"{topic}/offload")
    def offload_status(request, domain, tenant, namespace, topic):
        return admin.offload_status(name(domain, tenant, namespace, topic))

    @add("POST", f"{topic}/terminate")
    def terminate(request, domain, tenant, namespace, topic):
        return admin.terminate(name(domain, tenant, namespace, topic))

    # -- subscriptions
    @add("GET", f"{topic}/subscriptions")
    def subscriptions(request, domain, tenant, namespace, topic):
        return admin.list_subscriptions(name(domain, tenant, namespace, topic))

    @add("PUT", sub)
    def create_subscription(request, domain, tenant, namespace, topic, sub):
        return admin.create_subscription(name(domain, tenant, namespace, topic), sub,
                                         json_body(request, required=False))

    @add("DELETE", sub)
    def delete_subscription(request, domain, tenant, namespace, topic, sub):
        return admin.delete_subscription(name(domain, tenant, namespace, topic), sub,
                                         force=query_bool(request, "force"))

    @add("POST", f"{sub}/skip/{{count}}")
    def skip(request, domain, tenant, namespace, topic, sub, count):
        return admin.skip_messages(name(domain, tenant, namespace, topic), sub,
                                   int_param(count, "numMessages"))

    @add("POST", f"{sub}/skip_all")
    def skip_all(request, domain, tenant, namespace, topic, sub):
        return admin.skip_all(name(domain, tenant, namespace, topic), sub)

    @add("POST", f"{sub}/resetcursor/{{timestamp}}")
    def reset_to_time(request, domain, tenant, namespace, topic, sub, timestamp):
        return admin.reset_cursor_to_time(name(domain, tenant, namespace, topic), sub,
                                          int_param(timestamp, "timestamp"))

    @add("POST", f"{sub}/resetcursor")
    def reset_to_id(request, domain, tenant, namespace, topic, sub):
        return admin.reset_cursor_to_id(name(domain, tenant, namespace, topic), sub, json_body(request),
                                        excluded=query_bool(request, "isExcluded"))

    @add("POST", f"{sub}/expireMessages/{{seconds}}")
    def expire(request, domain, tenant, namespace, topic, sub, seconds):
        return admin.expire_messages(name(domain, tenant, namespace, topic), sub,
                                     int_param(seconds, "expireTimeInSeconds"))

    @add("POST", f"{sub}/replicatedSubscriptionStatus")
    def set_replicated_status(request, domain, tenant, namespace, topic, sub):
        # The body is a JSON boolean (400 for anything else, in the admin area).
        return admin.set_replicated_subscription_status(name(domain, tenant, namespace, topic), sub,
                                                        json_body(request))

    @add("GET", f"{sub}/replicatedSubscriptionStatus")
    def replicated_status(request, domain, tenant, namespace, topic, sub):
        return admin.replicated_subscription_status(name(domain, tenant, namespace, topic), sub)

    @add("GET", f"{sub}/position/{{position}}")
    async def peek(request, domain, tenant, namespace, topic, sub, position):
        headers, body = await admin.peek_message(name(domain, tenant, namespace, topic), sub,
                                                 int_param(position, "messagePosition"))
        return Response(200, body, headers, content_type="application/octet-stream")

    add_schema_routes(router, admin)  # /admin/v2/schemas


def listener_name_of(request) -> str:
    """The advertised listener an HTTP lookup asks for: Pulsar's ``listenerName`` query parameter,
    else its ``X-Pulsar-ListenerName`` header; "" for none (or no request, as in direct calls)."""
    if request is None:
        return ""
    listener = (query(request, "listenerName") or "").strip()
    if not listener:
        listener = (request.getHeader(b"x-pulsar-listenername") or b"").decode("utf-8", "replace").strip()
    return listener


def add_lookup_routes(router, admin) -> None:
    async def lookup(request, domain, tenant, namespace, topic):
        try:
            return await admin.lookup(admin.topic_name(domain, tenant, namespace, topic),
                                      listener_name=listener_name_of(request),
                                      authoritative=request is not None and query_bool(request, "authoritative"))
        except LookupRedirect as redirect:
            # Pulsar's TopicLookupBase: 307 to the same lookup on the other broker (its TLS web
            # URL when asked over TLS), with the placement's authoritative flag.
            base = redirect.http_url_tls if request.isSecure() and redirect.http_url_tls else redirect.http_url
            args = {"authoritative": "true" if redirect.authoritative else "false"}
            listener = listener_name_of(request)
            if listener:
                args["listenerName"] = listener
            location = base.rstrip("/") + request.path.decode("ascii", "replace") + "?" + urlencode(args)
            return Response(307, headers={"Location": location})
    _for_domains(router, "GET", "/lookup/v2/topic/{domain}/{tenant}/{namespace}/{topic}", lookup)

    # The v2 "destination" spelling older clients use.
    _for_domains(router, "GET", "/lookup/v2/destination/{domain}/{tenant}/{namespace}/{topic}", lookup)

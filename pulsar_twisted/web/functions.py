"""
Admin API v3 for Pulsar Functions (``/admin/v3/functions/...``, Pulsar's ``FunctionsApiV3Resource``
paths and JSON), answered by a ``functions.worker.FunctionsWorker``.

``worker`` is a callable giving the worker or None: the web site opens before the worker has
started (the worker's instances need the broker's listeners), and a standalone run with
``functionsWorkerEnabled=false`` has none; both answer 503 with Pulsar's reasons. Create and
update are ``multipart/form-data`` with a ``functionConfig`` JSON part and a ``data`` file part
(the .py), as ``pulsar-admin functions create`` sends them.

Pulsar IO (``/admin/v3/sources``, ``/admin/v3/sinks``): the built-in connectors' create, update,
get, delete, list, status and stats (whole and per instance), start/stop/restart
(``functions/io_worker.py``).
"""

import email.parser
import email.policy
import json

from pulsar_twisted.broker.admin.errors import AdminError, BadRequest
from pulsar_twisted.functions.errors import FunctionsError
from pulsar_twisted.web.routing import Response, int_param, query

V3 = "/admin/v3/functions/{tenant}/{namespace}"
FN = V3 + "/{name}"
NOT_READY = "Function worker service is not done initializing. Please try again in a little while."
#: Seconds a request waits for a starting worker (reading its topics) before 503.
READY_WAIT = 30.0
#: Seconds a write forwarded here waits for this worker to be told it leads (the failover delay).
LEADER_WAIT = 10.0
DISABLED = "Function worker service is not enabled on this broker (functionsWorkerEnabled=false)"


def multipart_parts(request) -> dict:
    """name -> bytes of a ``multipart/form-data`` body (any method: twisted.web parses POST
    forms only). BadRequest when the body is not multipart."""
    ctype = request.getHeader("content-type") or ""
    if not ctype.lower().startswith("multipart/form-data"):
        raise BadRequest("Expected a multipart/form-data body with functionConfig and data parts")
    request.content.seek(0)
    body = request.content.read()
    message = email.parser.BytesParser(policy=email.policy.HTTP).parsebytes(
        b"Content-Type: " + ctype.encode("latin-1") + b"\r\n\r\n" + body)
    parts = {}
    for part in message.iter_parts():
        name = part.get_param("name", header="content-disposition")
        if name:
            parts[name] = part.get_payload(decode=True) or b""
    return parts


def _config_part(parts: dict):
    raw = parts.get("functionConfig")
    if raw is None:
        return None
    try:
        return json.loads(raw)
    except (ValueError, UnicodeDecodeError) as e:
        raise BadRequest(f"Invalid functionConfig JSON: {e}")


def _handler(worker, method):
    """A route handler running ``method(worker, request, **params)`` on the current worker
    (503 without one) and answering a FunctionsError with its HTTP status."""
    async def handler(request, **params):
        current = worker()
        if current is None:
            disabled = getattr(worker, "disabled", False)
            raise AdminError(disabled if isinstance(disabled, str) else
                             DISABLED if disabled else NOT_READY, 503)
        if not getattr(current, "ready", True) and not await current.wait_ready(READY_WAIT):
            raise AdminError(NOT_READY, 503)
        coordinator = getattr(current, "coordinator", None)
        if (request.getHeader("x-pulsar-forwarded") and not getattr(current, "is_leader", True)
                and hasattr(coordinator, "wait_until_told")):
            # Forwarded here as to the leader that the brokers' stats name, before this worker's
            # consumer was told (the broker tells it the failover delay later): wait for the word
            # rather than refuse the write (_not_forwarded_again).
            await coordinator.wait_until_told(LEADER_WAIT)
        try:
            result = method(current, request, **params)
            if hasattr(result, "__await__"):
                result = await result
            return result
        except FunctionsError as e:
            raise AdminError(str(e), e.status)
    return handler


def _not_forwarded_again(w, request) -> None:
    """A write another worker forwarded here as to the leader: 503 when this worker is not the
    leader (any more) rather than forwarding it on (two workers disagreeing on the leader would
    pass it back and forth)."""
    if request.getHeader("x-pulsar-forwarded") and not getattr(w, "is_leader", True):
        raise AdminError("This functions worker is not the leader; try again", 503)


def _register(w, request, tenant, namespace, name):
    _not_forwarded_again(w, request)
    parts = multipart_parts(request)
    return w.register(tenant, namespace, name, _config_part(parts), parts.get("data"))


def _update(w, request, tenant, namespace, name):
    _not_forwarded_again(w, request)
    parts = multipart_parts(request)
    return w.update(tenant, namespace, name, _config_part(parts) or {}, parts.get("data"))


def _control(running, restart=False):
    def handler(w, request, tenant, namespace, name, instanceId=None):
        if not restart:
            _not_forwarded_again(w, request)
        chosen = None if instanceId is None else int_param(instanceId, "instanceId")
        return w.set_running(tenant, namespace, name, running, chosen, restart)
    return handler


def _deregister(w, request, tenant, namespace, name):
    _not_forwarded_again(w, request)
    return w.deregister(tenant, namespace, name)


def _put_state(w, request, tenant, namespace, name, key):
    ctype = (request.getHeader("content-type") or "").lower()
    if ctype.startswith("multipart/form-data"):
        raw = multipart_parts(request).get("state")
    else:
        request.content.seek(0)
        raw = request.content.read()
    try:
        state = json.loads(raw or b"null")
    except (ValueError, UnicodeDecodeError) as e:
        raise BadRequest(f"Invalid state JSON: {e}")
    return w.put_state(tenant, namespace, name, key, state)


async def _incr(w, request, tenant, namespace, name, key):
    amount = int_param(query(request, "amount", "1"), "amount")
    return {"key": key, "numberValue": await w.incr_counter(tenant, namespace, name, key, amount)}


def _state_routes(add, call) -> None:
    # First: ".../{name}/state/{key}" would otherwise match ".../{name}/{instanceId}/status".
    add("GET", FN + "/state/{key}", call(lambda w, r, tenant, namespace, name, key:
                                         w.get_state(tenant, namespace, name, key)))
    add("POST", FN + "/state/{key}", call(_put_state))
    add("DELETE", FN + "/state/{key}", call(lambda w, r, tenant, namespace, name, key:
                                            w.delete_state(tenant, namespace, name, key)))
    add("POST", FN + "/counter/{key}", call(_incr))


def _management_routes(add, call) -> None:
    add("GET", V3, call(lambda w, r, tenant, namespace: w.list(tenant, namespace)))
    add("POST", FN, call(_register))
    add("POST", FN + "/trigger", call(_trigger))
    add("PUT", FN, call(_update))
    add("DELETE", FN, call(_deregister))
    add("GET", FN, call(lambda w, r, tenant, namespace, name: w.get(tenant, namespace, name)))
    add("GET", FN + "/status", call(lambda w, r, tenant, namespace, name:
                                    w.status(tenant, namespace, name)))
    add("GET", FN + "/stats", call(lambda w, r, tenant, namespace, name:
                                   w.stats(tenant, namespace, name)))
    add("GET", FN + "/{instanceId}/status", call(lambda w, r, instanceId, **p: w.instance_status(
        p["tenant"], p["namespace"], p["name"], int_param(instanceId, "instanceId"))))
    add("GET", FN + "/{instanceId}/stats", call(lambda w, r, instanceId, **p: w.instance_stats(
        p["tenant"], p["namespace"], p["name"], int_param(instanceId, "instanceId"))))
    for verb, running, restart in (("start", True, False), ("stop", False, False),
                                   ("restart", True, True)):
        add("POST", FN + f"/{verb}", call(_control(running, restart)))
        add("POST", FN + "/{instanceId}/" + verb, call(_control(running, restart)))


async def _trigger(w, request, tenant, namespace, name):
    """Pulsar's trigger form: ``data`` (the value) or ``dataStream`` (a file), ``topic``; the
    answer is the output as text."""
    parts = multipart_parts(request)
    value = parts.get("dataStream", parts.get("data"))
    topic = parts.get("topic")
    output = await w.trigger(tenant, namespace, name, value, topic.decode() if topic else None)
    if output is None:
        return None
    return Response(200, output, content_type="text/plain")


def _connector_config_part(parts: dict, kind: str):
    raw = parts.get(f"{kind}Config")
    if raw is None:
        return None
    try:
        return json.loads(raw)
    except (ValueError, UnicodeDecodeError) as e:
        raise BadRequest(f"Invalid {kind}Config JSON: {e}")


def _connectors(kind):
    """The worker's manager of ``kind`` (``source`` or ``sink``)."""
    return lambda w: w.sources if kind == "source" else w.sinks


def _connector_routes(add, call) -> None:
    """Pulsar IO (SourcesApiV3Resource, SinksApiV3Resource): create (multipart ``sourceConfig``
    or ``sinkConfig``), update (the same, PUT), get, delete, list, status, stats,
    start/stop/restart and the built-in lists."""
    from pulsar_twisted.functions.connectors import BUILTIN_SINKS, BUILTIN_SOURCES
    for kind, builtins in (("source", BUILTIN_SOURCES), ("sink", BUILTIN_SINKS)):
        base, of = f"/admin/v3/{kind}s/{{tenant}}/{{namespace}}", _connectors(kind)
        one = base + "/{name}"
        add("GET", f"/admin/v3/{kind}s/builtin{kind}s",
            lambda request, builtins=builtins: [dict(d) for d in builtins.values()])
        add("GET", base, call(lambda w, r, tenant, namespace, of=of: of(w).list(tenant, namespace)))

        def register(w, request, tenant, namespace, name, of=of, kind=kind):
            _not_forwarded_again(w, request)
            parts = multipart_parts(request)
            return of(w).register(tenant, namespace, name, _connector_config_part(parts, kind))
        add("POST", one, call(register))

        def update(w, request, tenant, namespace, name, of=of, kind=kind):
            _not_forwarded_again(w, request)
            parts = multipart_parts(request)
            config = _connector_config_part(parts, kind)
            if config is None:
                raise BadRequest(f"{kind.capitalize()} config is not provided")
            return of(w).update(tenant, namespace, name, config)
        add("PUT", one, call(update))
        def deregister(w, request, tenant, namespace, name, of=of):
            _not_forwarded_again(w, request)
            return of(w).deregister(tenant, namespace, name)
        add("DELETE", one, call(deregister))
        add("GET", one, call(lambda w, r, of=of, **p: of(w).get(p["tenant"], p["namespace"], p["name"])))
        add("GET", one + "/status", call(lambda w, r, of=of, **p: of(w).status(
            p["tenant"], p["namespace"], p["name"])))
        add("GET", one + "/stats", call(lambda w, r, of=of, **p: of(w).stats(
            p["tenant"], p["namespace"], p["name"])))
        for suffix, method in (("status", "instance_status"), ("stats", "instance_stats")):
            add("GET", one + "/{instanceId}/" + suffix, call(
                lambda w, r, of=of, method=method, **p: getattr(of(w), method)(
                    p["tenant"], p["namespace"], p["name"], int_param(p["instanceId"], "instanceId"))))
        for verb, running, restart in (("start", True, False), ("stop", False, False),
                                       ("restart", True, True)):
            control = _connector_control(of, running, restart)
            add("POST", one + f"/{verb}", call(control))
            add("POST", one + "/{instanceId}/" + verb, call(control))


def _connector_control(of, running, restart):
    def handler(w, request, tenant, namespace, name, instanceId=None):
        if not restart:
            _not_forwarded_again(w, request)
        chosen = None if instanceId is None else int_param(instanceId, "instanceId")
        return of(w).set_running(tenant, namespace, name, running, chosen, restart)
    return handler


def add_function_routes(router, worker) -> None:
    """Every v3 route; ``worker()`` gives the FunctionsWorker, None until it runs (its
    ``disabled`` attribute says which 503 to answer)."""
    def call(method):
        return _handler(worker, method)
    _state_routes(router.add, call)
    _management_routes(router.add, call)
    _connector_routes(router.add, call)

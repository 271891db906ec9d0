"""
``pulsar-admin functions``: create, update, delete, get, list, status, stats, restart, stop,
start, querystate, putstate and trigger, with Pulsar's flags, over ``/admin/v3/functions``.

A function is named by ``--tenant``/``--namespace``/``--name`` (tenant ``public`` and namespace
``default`` when left out, the name from the class name's last part, as Pulsar's CLI does) or by
``--fqfn tenant/namespace/name``. ``create``/``update`` send Pulsar's multipart body: the
``functionConfig`` JSON and the ``--py`` file as ``data``. Mutations print Pulsar's
``Created successfully``-style lines; objects print as pretty JSON. ``localrun`` runs the
instances here, as child processes of the command, with no worker: until it is interrupted.
"""

import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import uuid

from pulsar_twisted.cli.admin import CommandError, _csv, _q
from pulsar_twisted.functions.credentials import add_localrun_flags, localrun_spec_fields, write_spec

V3 = "/admin/v3/functions"
GUARANTEES = ("ATLEAST_ONCE", "ATMOST_ONCE", "EFFECTIVELY_ONCE", "MANUAL")


def multipart_body(parts) -> tuple:
    """``(body, content_type)`` of ``multipart/form-data`` from ``[(name, filename, bytes,
    content_type)]`` (filename None for a plain field)."""
    boundary = uuid.uuid4().hex
    chunks = []
    for name, filename, data, ctype in parts:
        disposition = f'form-data; name="{name}"' + (f'; filename="{filename}"' if filename else "")
        chunks.append(f"--{boundary}\r\nContent-Disposition: {disposition}\r\n"
                      f"Content-Type: {ctype}\r\n\r\n".encode() + data + b"\r\n")
    chunks.append(f"--{boundary}--\r\n".encode())
    return b"".join(chunks), f"multipart/form-data; boundary={boundary}"


def _names(a) -> tuple:
    """``(tenant, namespace, name)`` from --fqfn or the separate flags (Pulsar's defaults)."""
    if a.fqfn:
        parts = a.fqfn.split("/")
        if len(parts) != 3 or not all(parts):
            raise CommandError(f"Fully qualified function name (FQFN) is invalid: {a.fqfn}")
        return tuple(parts)
    name = a.name
    if not name and getattr(a, "classname", None):
        name = a.classname.rsplit(".", 1)[-1]
    if not name:
        raise CommandError("You must specify a name for the function")
    return a.tenant or "public", a.namespace or "default", name


def _path(a, suffix: str = "") -> str:
    tenant, namespace, name = _names(a)
    return f"{V3}/{_q(tenant)}/{_q(namespace)}/{_q(name)}{suffix}"


def _function_config(a) -> dict:
    """The functionConfig JSON from the flags (only those given: an update changes only them)."""
    tenant, namespace, name = _names(a)
    config = {"tenant": tenant, "namespace": namespace, "name": name}
    if a.function_config_file:
        with open(a.function_config_file) as f:
            config = dict(json.load(f), **config)
    simple = {"className": a.classname, "output": a.output, "topicsPattern": a.topics_pattern,
              "parallelism": a.parallelism, "processingGuarantees": a.processing_guarantees,
              "deadLetterTopic": a.dead_letter_topic, "maxMessageRetries": a.max_message_retries,
              "subName": a.subs_name, "subscriptionPosition": a.subs_position,
              "logTopic": a.log_topic, "retainOrdering": a.retain_ordering or None,
              "autoAck": a.auto_ack, "outputSerdeClassName": a.output_serde_classname,
              "timeoutMs": a.timeout_ms}
    config.update({k: v for k, v in simple.items() if v is not None})
    if a.inputs:
        config["inputs"] = _csv(a.inputs)
    for flag, field in (("user_config", "userConfig"), ("secrets", "secrets")):
        value = getattr(a, flag)
        if value:
            try:
                config[field] = json.loads(value)
            except ValueError as e:
                raise CommandError(f"--{flag.replace('_', '-')} is not valid JSON: {e}")
    if a.py:
        config["py"] = a.py
        config.setdefault("runtime", "PYTHON")
    return config


def _upload(method: str, done: str):
    def run(a, c):
        config = _function_config(a)
        parts = [("functionConfig", None, json.dumps(config).encode(), "application/json")]
        if a.py:
            try:
                with open(a.py, "rb") as f:
                    parts.append(("data", os.path.basename(a.py), f.read(), "application/octet-stream"))
            except OSError as e:
                raise CommandError(f"Cannot read {a.py}: {e.strerror}")
        elif method == "POST":
            raise CommandError("Function package not provided: use --py")
        c.request(method, _path(a), form=multipart_body(parts))
        return done
    return run


def _instance(a, verb: str) -> str:
    return _path(a, f"/{a.instance_id}/{verb}" if a.instance_id is not None else f"/{verb}")


def _control(verb: str, done: str):
    def run(a, c):
        c.post(_instance(a, verb))
        return done
    return run


def _putstate(a, c):
    try:
        state = json.loads(a.state)
    except ValueError as e:
        raise CommandError(f"--state is not valid JSON: {e}")
    key = state.get("key") if isinstance(state, dict) else None
    if not key:
        raise CommandError("State key needs to be specified")
    c.post(_path(a, f"/state/{_q(key)}"), form=multipart_body(
        [("state", None, json.dumps(state).encode(), "application/json")]))
    return f"State {key} put successfully"


def _credential_fields(a) -> dict:
    """The instances' credentials from localrun's flags (CommandError when malformed)."""
    try:
        return localrun_spec_fields(a)
    except ValueError as e:
        raise CommandError(f"--client-auth-plugin/--client-auth-params: {e}")


def run_instances(spec_path: str, parallelism: int, first_id: int) -> None:
    """``parallelism`` instance processes of ``spec_path`` (ids from ``first_id``), waited for;
    Ctrl-C stops them (SIGTERM). CommandError naming the exit codes when one failed."""
    # Ctrl-C and SIGTERM both raise KeyboardInterrupt here, and so stop the instances, even when
    # this process started with SIGINT ignored (a shell without job control starts background
    # commands so): otherwise the command ignored Ctrl-C and a kill left its instances running.
    signal.signal(signal.SIGINT, signal.default_int_handler)
    signal.signal(signal.SIGTERM, signal.default_int_handler)
    children = [subprocess.Popen([sys.executable, "-m", "pulsar_twisted.functions.instance_main",
                                  spec_path, str(first_id + i)]) for i in range(parallelism)]
    try:
        codes = [child.wait() for child in children]
    except KeyboardInterrupt:
        for child in children:
            child.terminate()
        codes = [child.wait() for child in children]
    if any(codes):
        raise CommandError(f"Instances exited with codes {codes}")


def _localrun(a, c):
    """Pulsar's localrun: ``parallelism`` instance processes on this machine against
    ``--broker-service-url``; blocks until they exit or the command is interrupted. State calls
    go to ``--web-service-url``'s worker, where only a function registered there has state."""
    from pulsar_twisted.functions.config import FunctionConfig
    from pulsar_twisted.functions.errors import FunctionsError
    if not a.py:
        raise CommandError("Function package not provided: use --py")
    config = FunctionConfig.from_json(_function_config(a))
    try:
        config.validate()
    except FunctionsError as e:
        raise CommandError(str(e))
    directory = tempfile.mkdtemp(prefix="pulsar-localrun-")
    try:
        module = config.className.rpartition(".")[0] or config.className
        # A .zip or wheel keeps its name (the instance unpacks or installs it by it).
        kept = a.py.endswith((".zip", ".whl"))
        code_path = os.path.join(directory, os.path.basename(a.py) if kept else f"{module}.py")
        shutil.copyfile(a.py, code_path)
        spec_path = os.path.join(directory, "instance.json")
        write_spec(spec_path, {
            "functionConfig": config.to_json(), "codePath": code_path,
            "serviceUrl": a.broker_service_url, "webServiceUrl": a.web_service_url or c.base,
            "functionId": config.fqfn, "functionVersion": "0", **_credential_fields(a)})
        run_instances(spec_path, config.parallelism, a.instance_id_offset)
    finally:
        shutil.rmtree(directory, ignore_errors=True)
    return None


def _trigger(a, c):
    if (a.trigger_value is None) == (a.trigger_file is None):
        raise CommandError("Either a trigger value or a trigger filepath needs to be specified")
    if a.trigger_file:
        with open(a.trigger_file, "rb") as f:
            parts = [("dataStream", os.path.basename(a.trigger_file), f.read(), "application/octet-stream")]
    else:
        parts = [("data", None, a.trigger_value.encode(), "text/plain")]
    if a.topic:
        parts.append(("topic", None, a.topic.encode(), "text/plain"))
    headers, body = c.request("POST", _path(a, "/trigger"), form=multipart_body(parts), raw=True)
    return body.decode("utf-8", "replace")


def _name_flags(p) -> None:
    p.add_argument("--fqfn", help="The Fully Qualified Function Name (tenant/namespace/name)")
    p.add_argument("--tenant", help="The tenant of the function (default public)")
    p.add_argument("--namespace", help="The namespace of the function (default default)")
    p.add_argument("--name", help="The name of the function")


def _config_flags(p) -> None:
    p.add_argument("--py", help="Path to the main Python file of the function")
    p.add_argument("--classname", help="The function's class (module.Class) or function name")
    p.add_argument("--inputs", help="Comma-separated input topics")
    p.add_argument("--topics-pattern", help="Topic pattern to consume from (not supported yet)")
    p.add_argument("-o", "--output", help="The function's output topic")
    p.add_argument("--parallelism", type=int, help="Number of instances to run")
    p.add_argument("--processing-guarantees", choices=GUARANTEES,
                   help="The processing guarantees (delivery semantics)")
    p.add_argument("--user-config", help="User-defined config key/values (JSON)")
    p.add_argument("--secrets", help="Map of secret names to environment variables (JSON)")
    p.add_argument("--dead-letter-topic", help="Topic where messages that fail maxMessageRetries go")
    p.add_argument("--max-message-retries", type=int, help="Times a message is retried")
    p.add_argument("--retain-ordering", action="store_true", default=None,
                   help="Process messages in order (Failover subscription)")
    p.add_argument("--subs-name", help="Subscription name of the input consumer")
    p.add_argument("--subs-position", choices=("Latest", "Earliest"),
                   help="Where a new subscription starts")
    p.add_argument("--log-topic", help="Topic the function's logs go to")
    p.add_argument("--auto-ack", type=lambda v: v.lower() == "true", help="true or false")
    p.add_argument("--output-serde-classname", help="SerDe class of the output")
    p.add_argument("--timeout-ms", type=int, help="Message timeout in milliseconds")
    p.add_argument("--function-config-file", help="A JSON file with the functionConfig")


def add(sub) -> None:
    for verb, method, done, help in (("create", "POST", "Created successfully", "Create a function"),
                                     ("update", "PUT", "Updated successfully", "Update a function")):
        p = sub.add_parser(verb, help=help)
        _name_flags(p)
        _config_flags(p)
        p.set_defaults(run=_upload(method, done))
    p = sub.add_parser("delete", help="Delete a function")
    _name_flags(p)
    p.set_defaults(run=lambda a, c: c.delete(_path(a)) or "Deleted successfully")
    p = sub.add_parser("get", help="The config of a function")
    _name_flags(p)
    p.set_defaults(run=lambda a, c: c.get(_path(a)))
    p = sub.add_parser("list", help="The functions of a namespace")
    p.add_argument("--tenant", default="public")
    p.add_argument("--namespace", default="default")
    p.set_defaults(run=lambda a, c: c.get(f"{V3}/{_q(a.tenant)}/{_q(a.namespace)}"))
    for verb, help in (("status", "Status of a function (or one instance)"),
                       ("stats", "Stats of a function (or one instance)")):
        p = sub.add_parser(verb, help=help)
        _name_flags(p)
        p.add_argument("--instance-id", help="The instance id (all instances when left out)")
        p.set_defaults(run=lambda a, c, verb=verb: c.get(_instance(a, verb)))
    for verb, done in (("restart", "Restarted successfully"), ("stop", "Stopped successfully"),
                       ("start", "Started successfully")):
        p = sub.add_parser(verb, help=f"{verb.capitalize()} a function (or one instance)")
        _name_flags(p)
        p.add_argument("--instance-id", help="The instance id (all instances when left out)")
        p.set_defaults(run=_control(verb, done))
    _add_state_and_local(sub)


def _add_state_and_local(sub) -> None:
    p = sub.add_parser("querystate", help="A key of the function's state")
    _name_flags(p)
    p.add_argument("-k", "--key", required=True, help="The key of the state to query")
    p.set_defaults(run=lambda a, c: c.get(_path(a, f"/state/{_q(a.key)}")))
    p = sub.add_parser("putstate", help="Put a key of the function's state")
    _name_flags(p)
    p.add_argument("-s", "--state", required=True, help="The FunctionState JSON to put")
    p.set_defaults(run=_putstate)
    p = sub.add_parser("localrun", help="Run a function's instances here, without a worker")
    _name_flags(p)
    _config_flags(p)
    p.add_argument("--broker-service-url", default="pulsar://localhost:6650",
                   help="The Pulsar service URL the instances connect to")
    p.add_argument("--web-service-url", help="The worker serving state calls (default: --admin-url)")
    p.add_argument("--instance-id-offset", type=int, default=0, help="The first instance id")
    add_localrun_flags(p)
    p.set_defaults(run=_localrun)
    p = sub.add_parser("trigger", help="Send a value to a function and print its output for it")
    _name_flags(p)
    p.add_argument("--topic", help="The input topic to send to (when the function has several)")
    p.add_argument("--trigger-value", help="The value to send")
    p.add_argument("--trigger-file", help="A file whose content is sent")
    p.set_defaults(run=_trigger)

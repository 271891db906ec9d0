"""
``pulsar-admin sources`` and ``pulsar-admin sinks``: create, update, delete, get, list, status,
stats, start/stop/restart, localrun and ``available-sources``/``available-sinks``, with Pulsar's
flags, over ``/admin/v3/sources`` and ``/admin/v3/sinks``. A built-in connector is named by
``--source-type``/``--sink-type`` (sent as Pulsar does, ``archive: "builtin://<type>"``) or
``--archive builtin://<type>``; ``create`` and ``update`` send Pulsar's multipart body with the
``sourceConfig``/``sinkConfig`` JSON part (``update`` only the fields given). ``localrun`` runs
the instances as processes here against ``--broker-service-url``, without a worker.
"""

import json
import os
import shutil
import tempfile

from pulsar_twisted.cli.admin import CommandError, _csv, _q
from pulsar_twisted.cli.admin.functions import (
    GUARANTEES, _credential_fields, multipart_body, run_instances)
from pulsar_twisted.functions.credentials import add_localrun_flags, write_spec

#: Pulsar's CLI separates the available connectors with this line.
SEPARATOR = "-" * 40


def _names(a) -> tuple:
    if not a.name:
        raise CommandError(f"{a.kind.capitalize()} name must be specified")
    return a.tenant or "public", a.namespace or "default", a.name


def _path(a, suffix: str = "") -> str:
    tenant, namespace, name = _names(a)
    return f"/admin/v3/{a.kind}s/{_q(tenant)}/{_q(namespace)}/{_q(name)}{suffix}"


def _json_flag(value, flag):
    try:
        return json.loads(value)
    except ValueError as e:
        raise CommandError(f"{flag} is not valid JSON: {e}")


def _config_file(path: str, flag: str) -> dict:
    """Pulsar's ``--source-config-file``/``--sink-config-file``: the SourceConfig/SinkConfig as
    YAML (JSON is YAML too; plain JSON when PyYAML is not installed)."""
    try:
        with open(path) as f:
            text = f.read()
    except OSError as e:
        raise CommandError(f"{flag}: {e}")
    try:
        import yaml
        loaded = yaml.safe_load(text)
    except ImportError:
        loaded = _json_flag(text, flag)
    except yaml.YAMLError as e:
        raise CommandError(f"{flag} is not valid YAML: {e}")
    if not isinstance(loaded, dict):
        raise CommandError(f"{flag} must hold a mapping of the {flag.split('-')[2]}'s config fields")
    return loaded


def _connector_config(a) -> dict:
    """The sourceConfig/sinkConfig JSON from the config file (if any) and the flags given (the
    flags win)."""
    kind = a.kind
    from_file = {}
    if getattr(a, f"{kind}_config_file", None):
        from_file = _config_file(getattr(a, f"{kind}_config_file"), f"--{kind}-config-file")
        for field in ("tenant", "namespace", "name"):
            if from_file.get(field) and not getattr(a, field):
                setattr(a, field, from_file[field])
    tenant, namespace, name = _names(a)
    config = dict(from_file, tenant=tenant, namespace=namespace, name=name)
    archive = a.archive or (f"builtin://{getattr(a, kind + '_type')}"
                            if getattr(a, kind + "_type") else None)
    simple = {"archive": archive, "className": a.classname, "parallelism": a.parallelism,
              "processingGuarantees": a.processing_guarantees}
    if kind == "source":
        simple["topicName"] = a.destination_topic_name
    else:
        simple.update(sourceSubscriptionName=a.subs_name, sourceSubscriptionPosition=a.subs_position,
                      retainOrdering=a.retain_ordering or None, autoAck=a.auto_ack,
                      timeoutMs=a.timeout_ms, maxMessageRetries=a.max_redeliver_count,
                      deadLetterTopic=a.dead_letter_topic)
        if a.inputs:
            config["inputs"] = _csv(a.inputs)
    config.update({k: v for k, v in simple.items() if v is not None})
    raw = getattr(a, kind + "_config")
    if raw:
        config["configs"] = _json_flag(raw, f"--{kind}-config")
    return config


def _create(a, c):
    config = _connector_config(a)
    if not config.get("archive"):
        raise CommandError(f"{a.kind.capitalize()} archive not specified: use "
                           f"--{a.kind}-type or --archive")
    c.post(_path(a), form=multipart_body(
        [(f"{a.kind}Config", None, json.dumps(config).encode(), "application/json")]))
    return "Created successfully"


def _update(a, c):
    config = _connector_config(a)
    c.put(_path(a), form=multipart_body(
        [(f"{a.kind}Config", None, json.dumps(config).encode(), "application/json")]))
    return "Updated successfully"


def _instance_get(suffix: str):
    def run(a, c):
        if a.instance_id is not None:
            return c.get(_path(a, f"/{_q(str(a.instance_id))}/{suffix}"))
        return c.get(_path(a, f"/{suffix}"))
    return run


def _localrun(a, c):
    """Pulsar's localrun: ``parallelism`` instance processes of a built-in connector on this
    machine against ``--broker-service-url``; blocks until they exit or the command is
    interrupted (then stops them with SIGTERM, so a source's acked position is kept)."""
    from pulsar_twisted.functions.errors import FunctionsError
    from pulsar_twisted.functions.io_config import CONFIGS
    raw = _connector_config(a)
    if not raw.get("archive"):
        raise CommandError(f"{a.kind.capitalize()} archive not specified: use --{a.kind}-type or --archive")
    try:
        config = CONFIGS[a.kind].from_json(raw)
        config.validate()
    except FunctionsError as e:
        raise CommandError(str(e))
    directory = tempfile.mkdtemp(prefix=f"pulsar-localrun-{a.kind}-")
    try:
        spec_path = os.path.join(directory, "instance.json")
        write_spec(spec_path, {
            "componentType": a.kind.upper(), f"{a.kind}Config": config.to_json(),
            "serviceUrl": a.broker_service_url, "webServiceUrl": c.base,
            "functionId": config.fqn, "functionVersion": "0", **_credential_fields(a)})
        run_instances(spec_path, config.parallelism, a.instance_id_offset)
    finally:
        shutil.rmtree(directory, ignore_errors=True)
    return None


def _control(verb: str, done: str):
    def run(a, c):
        c.post(_path(a, f"/{a.instance_id}/{verb}" if a.instance_id is not None else f"/{verb}"))
        return done
    return run


def _available(a, c) -> str:
    lines = []
    for definition in c.get(f"/admin/v3/{a.kind}s/builtin{a.kind}s") or []:
        lines += [definition.get("name", ""), definition.get("description", ""), SEPARATOR]
    return "\n".join(lines)


def _name_flags(p) -> None:
    p.add_argument("--tenant", help="The tenant (default public)")
    p.add_argument("--namespace", help="The namespace (default default)")
    p.add_argument("--name", help="The connector's name")


def _create_flags(p, kind: str) -> None:
    p.add_argument("-t", f"--{kind}-type", help=f"The built-in {kind} connector's name")
    p.add_argument("-a", "--archive", help="The connector's archive (builtin://<type> here)")
    p.add_argument("--classname", help="The connector's class name")
    p.add_argument("--parallelism", type=int, help="Number of instances to run")
    p.add_argument("--processing-guarantees", choices=GUARANTEES, help="The processing guarantee")
    p.add_argument(f"--{kind}-config", help=f"The {kind}'s configs (JSON)")
    p.add_argument(f"--{kind}-config-file", help=f"A YAML (or JSON) file with the {kind}'s config fields")
    if kind == "source":
        p.add_argument("--destination-topic-name", help="The topic the source's records go to")
        return
    p.add_argument("-i", "--inputs", help="Comma-separated input topics")
    p.add_argument("--subs-name", help="The input subscription's name")
    p.add_argument("--subs-position", choices=("Latest", "Earliest"), help="Where a new subscription starts")
    p.add_argument("--retain-ordering", action="store_true", default=None, help="Failover subscription")
    p.add_argument("--auto-ack", type=lambda v: v.lower() == "true", help="true or false")
    p.add_argument("--timeout-ms", type=int, help="Message timeout in milliseconds")
    p.add_argument("--max-redeliver-count", type=int, help="Times a message is redelivered")
    p.add_argument("--dead-letter-topic", help="Topic where messages past the count go")


def _adder(kind: str):
    def add(sub) -> None:
        for verb, help, run in (("create", f"Create a {kind}", _create),
                                ("update", f"Update a {kind} (the fields given)", _update),
                                ("localrun", f"Run a {kind}'s instances here, without a worker", _localrun)):
            p = sub.add_parser(verb, help=help)
            _name_flags(p)
            _create_flags(p, kind)
            p.set_defaults(run=run, kind=kind)
            if verb == "localrun":
                p.add_argument("--broker-service-url", default="pulsar://localhost:6650",
                               help="The broker the instances connect to")
                p.add_argument("--instance-id-offset", type=int, default=0, help="The first instance id")
                add_localrun_flags(p)
            if verb == "update":
                p.add_argument("--update-auth-data", action="store_true", help="Accepted for Pulsar's "
                               "CLI compatibility (no function auth data here)")
        for verb, help, run in (
                ("delete", f"Delete a {kind}", lambda a, c: c.delete(_path(a)) or "Deleted successfully"),
                ("get", f"The config of a {kind}", lambda a, c: c.get(_path(a)))):
            p = sub.add_parser(verb, help=help)
            _name_flags(p)
            p.set_defaults(run=run, kind=kind)
        for verb, help in (("status", f"The status of a {kind} (or one instance)"),
                           ("stats", f"The counters of a {kind} (or one instance)")):
            p = sub.add_parser(verb, help=help)
            _name_flags(p)
            p.add_argument("--instance-id", type=int, help="The instance id (all instances when left out)")
            p.set_defaults(run=_instance_get(verb), kind=kind)
        for verb, done in (("restart", "Restarted successfully"), ("stop", "Stopped successfully"),
                           ("start", "Started successfully")):
            p = sub.add_parser(verb, help=f"{verb.capitalize()} a {kind} (or one instance)")
            _name_flags(p)
            p.add_argument("--instance-id", help="The instance id (all instances when left out)")
            p.set_defaults(run=_control(verb, done), kind=kind)
        p = sub.add_parser("list", help=f"The {kind}s of a namespace")
        p.add_argument("--tenant", default="public")
        p.add_argument("--namespace", default="default")
        p.set_defaults(run=lambda a, c: c.get(f"/admin/v3/{kind}s/{_q(a.tenant)}/{_q(a.namespace)}"),
                       kind=kind)
        p = sub.add_parser(f"available-{kind}s", help=f"The built-in {kind}s")
        p.set_defaults(run=_available, kind=kind)
    return add


add_sources = _adder("source")
add_sinks = _adder("sink")

"""
One function instance, as its own OS process (the process runtime):
``python -m pulsar_twisted.functions.instance_main SPEC.json INSTANCE_ID``.

``SPEC.json`` (written by the worker) holds ``functionConfig``, ``codePath`` (the .py file),
``serviceUrl``, ``webServiceUrl``, ``functionId`` and ``functionVersion``. The process loads the
user's file, finds ``className`` (``module.Name``: a class deriving from the official
``pulsar.Function``, a plain class with ``process(self, input)``, or a plain function; a bare
module name means its ``process`` function), subscribes to the inputs with the official client on
a Shared subscription (Failover when ``retainOrdering``) named ``subName`` or ``tenant/ns/name``,
and for each message:

- ATMOST_ONCE: acks on receipt, then processes (the official client sends acks within its
  100 ms grouping window, as Pulsar's instances do: a crash inside it redelivers);
- ATLEAST_ONCE: processes, sends the output and waits until it is persisted (and what
  ``context.publish`` sent), then acks; MANUAL (or ``autoAck=false``): the function acks;
- EFFECTIVELY_ONCE: as ATLEAST_ONCE on a Failover subscription, the output sent by one producer
  per input topic (named after the function and the topic) with the input's position as its
  sequence id (``sequence_id_of``: Pulsar's ``ledgerId << 28 | entryId``), so that the broker's deduplication
  (which must be on for the output's namespace, as in Pulsar) drops the resend of an input
  redelivered after a crash. Non-partitioned, unbatched inputs, as in Pulsar;
- a user exception negative-acks (redelivered after one second; with ``maxMessageRetries`` the
  consumer's dead-letter policy moves the message to ``deadLetterTopic`` past that count);
- a ``None`` result sends nothing (a filter).

Outputs carry ``__pfn_input_topic__`` and ``__pfn_input_msg_id__`` (base64 of the serialized
message id) and the input's key and, with ``forwardSourceMessageProperty``, its properties.
Counters go to the worker as JSON lines on file descriptor 3 (``supervisor.py``). A spec whose
``componentType`` is ``SOURCE`` or ``SINK`` runs a Pulsar IO instance instead (``io_instance.py``).
"""

import base64
import importlib.util
import inspect
import json
import logging
import os
import signal
import sys
import time
import traceback

#: Negative-acked messages come back after this long (the official client's default is a minute,
#: too slow for a function retrying a failing input).
NACK_DELAY_MS = 1000


def _die_with_parent() -> None:
    """SIGKILL when the worker dies (Linux PR_SET_PDEATHSIG), so no instance outlives it."""
    try:
        import ctypes
        ctypes.CDLL(None).prctl(1, signal.SIGKILL, 0, 0, 0)
    except Exception:
        pass


def sequence_id_of(position) -> int:
    """The EFFECTIVELY_ONCE sequence id of an input position: Pulsar's ``ledgerId << 28 |
    entryId``, plus one because the official Python client treats a ``sequence_id`` of 0 as
    unset (and would number the message itself), which the first entry of ledger 0 would be."""
    return ((position.ledger_id() << 28) | position.entry_id()) + 1


def unpack_zip(code_path: str) -> list:
    """Extract a .zip package beside it and return the directories to put on ``sys.path``:
    Pulsar's layout ``<name>/src`` (``<name>`` the archive's name; else a lone top folder or the
    archive root), and, when ``<name>/deps`` holds wheels, the directory pip installs them into
    (offline: ``--no-index --find-links deps``), as Pulsar's Python instance does. With a
    ``<name>/requirements.txt`` naming requirements, those are pip-installed instead (from deps/
    when it exists, else from the index)."""
    import zipfile
    target = os.path.join(os.path.dirname(code_path), "unpacked")
    with zipfile.ZipFile(code_path) as archive:
        archive.extractall(target)
    top = os.path.join(target, os.path.splitext(os.path.basename(code_path))[0])
    if not os.path.isdir(top):
        entries = [e for e in os.listdir(target) if os.path.isdir(os.path.join(target, e))]
        top = os.path.join(target, entries[0]) if len(entries) == 1 else target
    src = os.path.join(top, "src")
    paths = [src if os.path.isdir(src) else top]
    deps = os.path.join(top, "deps")
    wheels = sorted(os.path.join(deps, f) for f in os.listdir(deps) if f.endswith(".whl")) \
        if os.path.isdir(deps) else []
    requirements = os.path.join(top, "requirements.txt")
    wanted = _requirement_lines(requirements)
    offline = ["--no-index", "--find-links", deps] if os.path.isdir(deps) else []
    if wanted:
        # Only when requirements are given: from deps/ when it exists (offline), else the index.
        paths.append(_pip_install(target, offline + ["-r", requirements]))
    elif wheels:
        paths.append(_pip_install(target, offline + wheels))
    return paths


def _requirement_lines(path: str) -> list:
    if not os.path.isfile(path):
        return []
    with open(path) as f:
        return [line for line in (raw.split("#", 1)[0].strip() for raw in f) if line]


def _pip_install(directory: str, arguments: list) -> str:
    """``pip install --target <directory>/site`` (the instance's own directory, no venv); the
    directory to put on ``sys.path``. pip's complaint is raised with its output."""
    import subprocess
    site = os.path.join(directory, "site")
    done = subprocess.run([sys.executable, "-m", "pip", "install", "--quiet", "--upgrade",
                           "--disable-pip-version-check", "--root-user-action=ignore",
                           "--target", site] + arguments, capture_output=True, text=True)
    if done.returncode != 0:
        raise RuntimeError(f"pip install {' '.join(arguments)} failed: "
                           f"{(done.stderr or done.stdout).strip()[-2000:]}")
    return site


def install_wheel(code_path: str) -> list:
    """A wheel package (Pulsar's Python runtime takes ``--py x.whl``): installed with its
    dependencies into ``site`` beside it; the directories to put on ``sys.path``."""
    return [_pip_install(os.path.dirname(code_path), [code_path])]


def _import_user_module(code_path: str, module_name: str):
    """The user's module: from the .py file itself, or by name from an unpacked .zip."""
    if code_path.endswith(".zip"):
        sys.path[:0] = unpack_zip(code_path)
        return importlib.import_module(module_name)
    if code_path.endswith(".whl"):
        sys.path[:0] = install_wheel(code_path)
        return importlib.import_module(module_name)
    spec = importlib.util.spec_from_file_location(module_name, code_path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[module_name] = module
    spec.loader.exec_module(module)
    return module


def load_function(code_path: str, class_name: str):
    """``callable(input, context)``: the user's code wrapped to one signature."""
    import pulsar
    module_name, _, attribute = class_name.rpartition(".")
    if not module_name:
        module_name, attribute = class_name, "process"
    module = _import_user_module(code_path, module_name)
    target = getattr(module, attribute, None)
    if target is None and hasattr(module, "process"):
        target = module.process
    if target is None:
        raise ImportError(f"{class_name} not found in {code_path}")
    if inspect.isclass(target):
        instance = target()
        if isinstance(instance, pulsar.Function):
            return instance.process
        return lambda value, context: instance.process(value)
    return lambda value, context: target(value)


class Instance:
    """The receive-process-publish-ack loop of one instance (see the module docstring)."""

    def __init__(self, spec: dict, instance_id: int, status_out):
        self.spec = spec
        self.config = spec["functionConfig"]
        self.instance_id = instance_id
        self.status_out = status_out
        self.counts = {"numReceived": 0, "numSuccessfullyProcessed": 0, "numUserExceptions": 0,
                       "numSystemExceptions": 0, "averageLatency": 0.0, "lastInvocationTime": 0}
        self.latest_user_exceptions = []
        self.running = True
        guarantee = self.config.get("processingGuarantees") or "ATLEAST_ONCE"
        self.guarantee = guarantee
        self.auto_ack = guarantee != "MANUAL" and self.config.get("autoAck", True)
        self.output = None
        self.outputs_by_input = {}      # EFFECTIVELY_ONCE: input topic -> its output producer

    def report(self, event: str, **fields) -> None:
        fields["event"] = event
        self.status_out.write(json.dumps(fields) + "\n")
        self.status_out.flush()

    def run(self) -> None:
        import pulsar
        from pulsar_twisted.functions.context import InstanceContext, StateClient
        from pulsar.functions import serde
        c = self.config
        self.process = load_function(self.spec["codePath"], c["className"])
        self.client = pulsar.Client(self.spec["serviceUrl"], operation_timeout_seconds=30)
        self.consumer = self._subscribe(pulsar)
        if c.get("output") and self.guarantee != "EFFECTIVELY_ONCE":
            self.output = self.client.create_producer(c["output"], block_if_queue_full=True)
        self.in_serde = serde.IdentitySerDe()
        self.out_serde = serde.IdentitySerDe()
        if c.get("outputSerdeClassName"):
            from pulsar_twisted.functions.context import _serde
            self.out_serde = _serde(c["outputSerdeClassName"])
        self.context = InstanceContext(
            self.spec, self.instance_id, self.client,
            StateClient(self.spec["webServiceUrl"], c["tenant"], c["namespace"], c["name"]),
            lambda msg_id, topic: self.consumer.acknowledge(msg_id))
        self.report("running")
        while self.running:
            try:
                message = self.consumer.receive(timeout_millis=500)
            except pulsar.Timeout:
                continue
            self.handle(message)
        self.client.close()

    def _subscribe(self, pulsar):
        """The input consumer: Shared, or Failover for ordering and EFFECTIVELY_ONCE; the
        dead-letter policy from maxMessageRetries/deadLetterTopic."""
        c = self.config
        consumer_type = (pulsar.ConsumerType.Failover
                         if c.get("retainOrdering") or self.guarantee == "EFFECTIVELY_ONCE"
                         else pulsar.ConsumerType.Shared)
        position = (pulsar.InitialPosition.Earliest if c.get("subscriptionPosition") == "Earliest"
                    else pulsar.InitialPosition.Latest)
        dlq = None
        if c.get("maxMessageRetries") is not None and c["maxMessageRetries"] >= 0:
            dlq = pulsar.ConsumerDeadLetterPolicy(c["maxMessageRetries"], c.get("deadLetterTopic"))
        inputs = list(c.get("inputs") or [])
        for mapping in ("customSerdeInputs", "customSchemaInputs", "inputSpecs"):
            inputs += [t for t in (c.get(mapping) or {}) if t not in inputs]
        return self.client.subscribe(
            inputs if len(inputs) > 1 else inputs[0], c.get("subName") or
            f"{c['tenant']}/{c['namespace']}/{c['name']}", consumer_type=consumer_type,
            initial_position=position, negative_ack_redelivery_delay_ms=NACK_DELAY_MS,
            dead_letter_policy=dlq, consumer_name=f"{c['name']}-{self.instance_id}")

    def handle(self, message) -> None:
        self.counts["numReceived"] += 1
        started = time.time()
        self.counts["lastInvocationTime"] = int(started * 1000)
        if self.guarantee == "ATMOST_ONCE":
            self.consumer.acknowledge(message)
        self.context.set_message(message)
        try:
            result = self.process(self.in_serde.deserialize(message.data()), self.context)
        except Exception as e:
            self.counts["numUserExceptions"] += 1
            self.latest_user_exceptions = (self.latest_user_exceptions + [{
                "exceptionString": f"{type(e).__name__}: {e}", "msSinceEpoch": int(time.time() * 1000)}])[-10:]
            logging.getLogger(__name__).error("process raised:\n%s", traceback.format_exc())
            if self.guarantee != "ATMOST_ONCE":
                self.consumer.negative_acknowledge(message)
            self._report_stats(started)
            return
        try:
            output = self._output_for(message)
            if result is not None and output is not None:
                conf = self._output_conf(message)
                if self.guarantee == "EFFECTIVELY_ONCE":
                    position = message.message_id()
                    conf["sequence_id"] = sequence_id_of(position)
                output.send(self.out_serde.serialize(result), **conf)
            self.context.flush_publishes()
        except Exception as e:
            self.counts["numSystemExceptions"] += 1
            logging.getLogger(__name__).error("output failed: %s", e)
            if self.guarantee != "ATMOST_ONCE":
                self.consumer.negative_acknowledge(message)
            self._report_stats(started)
            return
        if self.auto_ack and self.guarantee in ("ATLEAST_ONCE", "EFFECTIVELY_ONCE"):
            self.consumer.acknowledge(message)
        self.counts["numSuccessfullyProcessed"] += 1
        self._report_stats(started)

    def _output_for(self, message):
        """The output producer: the one of the message's input topic under EFFECTIVELY_ONCE
        (its name stays the same across instance restarts, so deduplication carries over)."""
        if self.guarantee != "EFFECTIVELY_ONCE" or not self.config.get("output"):
            return self.output
        topic = message.topic_name()
        producer = self.outputs_by_input.get(topic)
        if producer is None:
            c = self.config
            name = "pfn-{}.{}.{}-{}".format(c["tenant"], c["namespace"], c["name"],
                                            topic.split("://")[-1].replace("/", "."))
            producer = self.outputs_by_input[topic] = self.client.create_producer(
                c["output"], producer_name=name, block_if_queue_full=True)
        return producer

    def _output_conf(self, message) -> dict:
        properties = {}
        if self.config.get("forwardSourceMessageProperty", True):
            properties.update(message.properties())
        properties["__pfn_input_topic__"] = message.topic_name()
        properties["__pfn_input_msg_id__"] = base64.b64encode(message.message_id().serialize()).decode()
        conf = {"properties": properties}
        if message.partition_key():
            conf["partition_key"] = message.partition_key()
        if message.event_timestamp():
            conf["event_timestamp"] = message.event_timestamp()
        return conf

    def _report_stats(self, started: float) -> None:
        latency = (time.time() - started) * 1000.0
        n = self.counts["numReceived"]
        self.counts["averageLatency"] += (latency - self.counts["averageLatency"]) / max(n, 1)
        self.report("stats", latestUserExceptions=self.latest_user_exceptions,
                    userMetrics=self.context.user_metrics(), **self.counts)


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    _die_with_parent()
    logging.basicConfig(level=logging.INFO, stream=sys.stderr,
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    with open(argv[0]) as f:
        spec = json.load(f)
    try:
        status_out = os.fdopen(3, "w")
    except OSError:
        # No worker reading (``pulsar-admin functions localrun``): the reports go nowhere.
        status_out = open(os.devnull, "w")
    if spec.get("componentType") in ("SOURCE", "SINK"):
        from pulsar_twisted.functions.io_instance import INSTANCES
        instance = INSTANCES[spec["componentType"]](spec, int(argv[1]), status_out)
    else:
        instance = Instance(spec, int(argv[1]), status_out)

    def stop(signum, frame):
        instance.running = False
    signal.signal(signal.SIGTERM, stop)
    try:
        instance.run()
    except Exception as e:
        try:
            instance.report("error", error=f"{type(e).__name__}: {e}")
        except OSError:
            pass
        traceback.print_exc()
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())

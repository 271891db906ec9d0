"""
The ``Context`` a function instance hands to ``process(input, context)``: what the official
``pulsar.functions.context.Context`` declares, over the official client in the instance process.

State (``put_state``/``get_state``/``incr_counter``/``get_counter``/``del_counter``) is durable
on the platform: it lives in the worker's metadata store (``store.py``), reached through the
worker's REST API (``/admin/v3/functions/{tenant}/{ns}/{name}/state/{key}``, Pulsar's
querystate/putstate paths, and ``.../counter/{key}`` for increments), so every instance of a
function sees the same values and they survive instance and worker restarts. Blocking calls:
the instance process is a plain loop, as Pulsar's Python instance is.
"""

import base64
import json
import logging
import struct
import urllib.error
import urllib.parse
import urllib.request

from pulsar.functions import context as official_context
from pulsar.functions import serde as official_serde


class StateError(Exception):
    """The worker refused or could not be reached for a state call."""


def _serde(name: str):
    """Pulsar's serde class names (``serde.IdentitySerDe``, ``serde.PickleSerDe``)."""
    short = (name or "serde.IdentitySerDe").rsplit(".", 1)[-1]
    cls = getattr(official_serde, short, None)
    if cls is None:
        raise ValueError(f"Unknown serde {name}")
    return cls()


class StateClient:
    """State calls for one function, one HTTP request each (``web_url`` is the worker's)."""

    def __init__(self, web_url: str, tenant: str, namespace: str, name: str, timeout: float = 30.0,
                 headers: dict = None):
        q = lambda s: urllib.parse.quote(s, safe="")  # noqa: E731
        self.base = f"{web_url.rstrip('/')}/admin/v3/functions/{q(tenant)}/{q(namespace)}/{q(name)}"
        self.timeout = timeout
        #: Sent on each call (the instance's ``Authorization``: ``credentials.http_headers``).
        self.headers = dict(headers or {})

    def _call(self, method, path, body=None):
        data = None if body is None else json.dumps(body).encode()
        request = urllib.request.Request(self.base + path, data=data, method=method,
                                         headers={"Content-Type": "application/json", **self.headers})
        try:
            with urllib.request.urlopen(request, timeout=self.timeout) as response:
                content = response.read()
        except urllib.error.HTTPError as e:
            if e.code == 404:
                return None
            raise StateError(f"{method} {path}: HTTP {e.code} {e.read()[:200]!r}")
        except OSError as e:
            raise StateError(f"{method} {path}: {e}")
        return json.loads(content) if content.strip() else {}

    def _key(self, key) -> str:
        return urllib.parse.quote(str(key), safe="")

    def get(self, key):
        """The value as bytes (a counter as Pulsar stores it: 8 bytes big-endian), or None."""
        state = self._call("GET", f"/state/{self._key(key)}")
        if state is None:
            return None
        if state.get("numberValue") is not None and state.get("byteValue") is None \
                and state.get("stringValue") is None:
            return struct.pack(">q", state["numberValue"])
        if state.get("byteValue") is not None:
            return base64.b64decode(state["byteValue"])
        return (state.get("stringValue") or "").encode()

    def put(self, key, value) -> None:
        if isinstance(value, str):
            value = value.encode()
        self._call("POST", f"/state/{self._key(key)}",
                   {"key": str(key), "byteValue": base64.b64encode(bytes(value)).decode()})

    def counter(self, key) -> int:
        state = self._call("GET", f"/state/{self._key(key)}")
        return 0 if state is None else int(state.get("numberValue") or 0)

    def incr(self, key, amount) -> int:
        return int(self._call("POST", f"/counter/{self._key(key)}?amount={int(amount)}")["numberValue"])

    def delete(self, key) -> None:
        self._call("DELETE", f"/state/{self._key(key)}")


class InstanceContext(official_context.Context):
    """The context of one instance; ``set_message`` points it at the message being processed.
    ``client`` is the official ``pulsar.Client``; ``ack`` is the instance's ack callable."""

    def __init__(self, spec: dict, instance_id: int, client, state: StateClient, ack):
        self.spec = spec
        self.config = spec["functionConfig"]
        self.instance_id = instance_id
        self.client = client
        self.state = state
        self._ack = ack
        self.message = None
        self.producers = {}
        self.metrics = {}
        self.logger = logging.getLogger(f"{self.config['tenant']}/{self.config['namespace']}/"
                                        f"{self.config['name']}")

    def set_message(self, message) -> None:
        self.message = message

    # ---------------------------------------------------------------- the message
    def get_message_id(self):
        return self.message.message_id()

    def get_message_key(self):
        return self.message.partition_key() or None

    def get_message_eventtime(self):
        return self.message.event_timestamp()

    def get_message_properties(self):
        return self.message.properties()

    def get_current_message_topic_name(self):
        return self.message.topic_name()

    def get_partition_key(self):
        return self.message.partition_key() or None

    def get_ordering_key(self):
        return self.message.ordering_key() if hasattr(self.message, "ordering_key") else None

    # ---------------------------------------------------------------- the function
    def get_function_tenant(self):
        return self.config["tenant"]

    def get_function_namespace(self):
        return self.config["namespace"]

    def get_function_name(self):
        return self.config["name"]

    def get_function_id(self):
        return self.spec["functionId"]

    def get_instance_id(self):
        return self.instance_id

    def get_function_version(self):
        return self.spec["functionVersion"]

    def get_logger(self):
        return self.logger

    def get_user_config_value(self, key):
        return (self.config.get("userConfig") or {}).get(key)

    def get_user_config_map(self):
        return dict(self.config.get("userConfig") or {})

    def get_secret(self, secret_name):
        """Secrets come from the environment (Pulsar's ``EnvironmentBasedSecretsProvider``, the
        process runtime's default): the value of the variable named by ``secrets[secret_name]``."""
        import os
        ref = (self.config.get("secrets") or {}).get(secret_name)
        if ref is None:
            return None
        return os.environ.get(ref if isinstance(ref, str) else secret_name)

    def get_input_topics(self):
        return list(self.config.get("inputs") or [])

    def get_output_topic(self):
        return self.config.get("output")

    def get_output_serde_class_name(self):
        return self.config.get("outputSerdeClassName")

    # ---------------------------------------------------------------- doing things
    def record_metric(self, metric_name, metric_value):
        total, count = self.metrics.get(metric_name, (0.0, 0))
        self.metrics[metric_name] = (total + float(metric_value), count + 1)

    def user_metrics(self) -> dict:
        """Per metric, the mean of the values recorded (Pulsar's ``userMetrics`` in stats)."""
        return {name: total / count for name, (total, count) in self.metrics.items() if count}

    def publish(self, topic_name, message, serde_class_name="serde.IdentitySerDe", properties=None,
                compression_type=None, callback=None, message_conf=None):
        producer = self.producers.get(topic_name)
        if producer is None:
            producer = self.producers[topic_name] = self.client.create_producer(
                topic_name, block_if_queue_full=True)
        conf = dict(message_conf or {})
        if properties:
            conf["properties"] = properties
        payload = _serde(serde_class_name).serialize(message)
        if callback is None:
            def callback(result, message_id):
                pass
        producer.send_async(payload, callback, **conf)

    def flush_publishes(self) -> None:
        """Wait until everything ``publish`` sent is persisted (before an ATLEAST_ONCE ack)."""
        for producer in self.producers.values():
            producer.flush()

    def ack(self, msgid, topic):
        self._ack(msgid, topic)

    def incr_counter(self, key, amount):
        return self.state.incr(key, amount)

    def get_counter(self, key):
        return self.state.counter(key)

    def del_counter(self, key):
        self.state.delete(key)

    def put_state(self, key, value):
        self.state.put(key, value)

    def get_state(self, key):
        return self.state.get(key)

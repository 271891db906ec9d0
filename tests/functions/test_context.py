"""InstanceContext: the official Context API over fakes of the official client and state."""

import logging

from pulsar.functions import context as official_context
from twisted.trial.unittest import SynchronousTestCase

from pulsar_twisted.functions.context import InstanceContext


class FakeMessage:
    def __init__(self):
        self._id = object()

    def message_id(self):
        return self._id

    def partition_key(self):
        return "k1"

    def event_timestamp(self):
        return 1234

    def properties(self):
        return {"a": "b"}

    def topic_name(self):
        return "persistent://public/default/in"


class FakeProducer:
    def __init__(self):
        self.sent, self.flushed = [], 0

    def send_async(self, payload, callback, **conf):
        self.sent.append((payload, conf))

    def flush(self):
        self.flushed += 1


class FakeClient:
    def __init__(self):
        self.producers = {}

    def create_producer(self, topic, **kw):
        return self.producers.setdefault(topic, FakeProducer())


class FakeState:
    def __init__(self):
        self.values, self.counters = {}, {}

    def get(self, key):
        return self.values.get(key)

    def put(self, key, value):
        self.values[key] = value.encode() if isinstance(value, str) else value

    def counter(self, key):
        return self.counters.get(key, 0)

    def incr(self, key, amount):
        self.counters[key] = self.counters.get(key, 0) + amount
        return self.counters[key]

    def delete(self, key):
        self.counters.pop(key, None)
        self.values.pop(key, None)


SPEC = {"functionConfig": {"tenant": "public", "namespace": "default", "name": "f",
                           "inputs": ["persistent://public/default/in"],
                           "output": "persistent://public/default/out",
                           "userConfig": {"word": "x"}, "secrets": {"pw": "PW_VAR"}},
        "functionId": "public/default/f", "functionVersion": "3"}


class ContextTests(SynchronousTestCase):

    def setUp(self):
        self.client, self.state, self.acks = FakeClient(), FakeState(), []
        self.context = InstanceContext(SPEC, 2, self.client, self.state,
                                       lambda msg_id, topic: self.acks.append((msg_id, topic)))
        self.message = FakeMessage()
        self.context.set_message(self.message)

    def test_is_the_official_context(self):
        """It is an official ``pulsar.functions.context.Context`` defining every method the
        official one declares."""
        self.assertIsInstance(self.context, official_context.Context)
        declared = {n for n, v in vars(official_context.Context).items()
                    if callable(v) and not n.startswith("_")}
        self.assertEqual(sorted(n for n in declared if n not in vars(InstanceContext)), [])

    def test_message_and_function_facts(self):
        """Message id, key, event time, properties, topic; tenant, names, instance, version."""
        c = self.context
        self.assertIs(c.get_message_id(), self.message.message_id())
        self.assertEqual((c.get_message_key(), c.get_partition_key(), c.get_message_eventtime(),
                          c.get_message_properties(), c.get_current_message_topic_name()),
                         ("k1", "k1", 1234, {"a": "b"}, "persistent://public/default/in"))
        self.assertEqual((c.get_function_tenant(), c.get_function_namespace(), c.get_function_name(),
                          c.get_function_id(), c.get_instance_id(), c.get_function_version()),
                         ("public", "default", "f", "public/default/f", 2, "3"))
        self.assertEqual((c.get_input_topics(), c.get_output_topic()),
                         (["persistent://public/default/in"], "persistent://public/default/out"))
        self.assertIsInstance(c.get_logger(), logging.Logger)

    def test_user_config_and_secrets(self):
        """User config by key and whole; a secret from the environment variable it names."""
        self.assertEqual(self.context.get_user_config_value("word"), "x")
        self.assertIsNone(self.context.get_user_config_value("nope"))
        self.assertEqual(self.context.get_user_config_map(), {"word": "x"})
        self.patch(__import__("os").environ, "get", lambda name, default=None: "s3cret"
                   if name == "PW_VAR" else default)
        self.assertEqual(self.context.get_secret("pw"), "s3cret")
        self.assertIsNone(self.context.get_secret("other"))

    def test_publish_serializes_and_flushes(self):
        """publish sends through one producer per topic with the serde; flush waits for them."""
        self.context.publish("persistent://public/default/side", "hello", properties={"p": "1"})
        self.context.publish("persistent://public/default/side", 7)
        producer = self.client.producers["persistent://public/default/side"]
        self.assertEqual(producer.sent, [(b"hello", {"properties": {"p": "1"}}), (b"7", {})])
        self.context.flush_publishes()
        self.assertEqual(producer.flushed, 1)

    def test_state_counters_metrics_ack(self):
        """State and counters go to the state client; metrics average; ack reaches the consumer."""
        c = self.context
        self.assertEqual(c.incr_counter("n", 2), 2)
        self.assertEqual(c.incr_counter("n", 3), 5)
        self.assertEqual(c.get_counter("n"), 5)
        c.del_counter("n")
        self.assertEqual(c.get_counter("n"), 0)
        c.put_state("k", "v")
        self.assertEqual(c.get_state("k"), b"v")
        c.record_metric("latency", 1)
        c.record_metric("latency", 3)
        self.assertEqual(c.user_metrics(), {"latency": 2.0})
        c.ack(self.message.message_id(), "persistent://public/default/in")
        self.assertEqual(self.acks, [(self.message.message_id(), "persistent://public/default/in")])

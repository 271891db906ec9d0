"""
/metrics beyond the topic basics (web/broker_metrics.py): subscription, consumer, storage, broker,
managed-ledger, connection and lookup families with Pulsar's names and labels, each checked
against what the broker did (messages published, dispatched, acked; connections; lookups), on the
in-memory broker and a ``task.Clock``. The exposition is parsed with prometheus_client's parser.
"""

from prometheus_client.parser import text_string_to_metric_families
from twisted.internet import defer

from pulsar_twisted.broker.admin.service import AdminService
from pulsar_twisted.proto import PulsarApi_pb2 as api
from pulsar_twisted.web.metrics import MetricsPage
from tests.broker.messaging import TOPIC, FeatureCase, Sub, T, messages

NS = "public/default"
SUB = {"cluster": "standalone", "namespace": NS, "topic": TOPIC, "subscription": "s"}
TOPIC_LABELS = {"cluster": "standalone", "namespace": NS, "topic": TOPIC}
CLUSTER = {"cluster": "standalone"}


class MetricsCase(FeatureCase):
    def setUp(self):
        d = super().setUp()
        d.addCallback(lambda _: self._registry())
        return d

    def _registry(self):
        admin = AdminService(self.harness.broker, self.harness.store, self.harness.config, self.clock)
        self.page = MetricsPage(admin, "standalone")

    def scrape(self) -> dict:
        """``{(sample name, frozenset of labels): value}`` of one scrape, parsed back."""
        text = self.page.render_now().decode()
        samples = {}
        for family in text_string_to_metric_families(text):
            for s in family.samples:
                key = (s.name, frozenset(s.labels.items()))
                self.assertNotIn(key, samples, f"duplicate sample {key}")
                samples[key] = s.value
        return samples

    def value(self, samples, name, labels):
        return samples[(name, frozenset(labels.items()))]

    def producer_client(self, n=0):
        client = self.harness.client()
        self.create_producer(client)
        for seq in range(n):
            self.send(client, seq)
        return client


class LedgerSwitchMetricsTests(MetricsCase):
    config = {"managedLedgerMaxEntriesPerLedger": 2, "managedLedgerMinLedgerRolloverTimeMinutes": 0}

    def test_ledger_switches_counted(self):
        """5 adds on ledgers of 2 entries: 2 switches, in Pulsar's LedgerSwitchLatencyBuckets."""
        ml = {"cluster": "standalone", "namespace": NS}
        self.producer_client(5)
        samples = self.scrape()
        counted = sum(value for (name, _), value in samples.items()
                      if name == "pulsar_ml_LedgerSwitchLatencyBuckets")
        self.assertEqual(counted, 2)
        self.assertEqual(self.value(samples, "pulsar_ml_LedgerSwitchLatencyBuckets_OVERFLOW", ml), 0)


class SubscriptionMetricsTests(MetricsCase):
    config = {"maxUnackedMessagesPerSubscription": 3}

    def test_backlog_unacked_and_consumers(self):
        """10 published, Shared consumer with 4 permits, 2 acked: backlog 8, unacked 2."""
        producer = self.producer_client(10)
        consumer = self.harness.client()
        self.subscribe(consumer, 1, kind=Sub.Shared, permits=4)
        got = messages(consumer.received())
        self.assertEqual(len(got), 4)
        self.ack(consumer, 1, [got[0][0].message.message_id, got[1][0].message.message_id])
        samples = self.scrape()
        self.assertEqual(self.value(samples, "pulsar_subscription_back_log", SUB), 8)
        self.assertEqual(self.value(samples, "pulsar_subscription_back_log_no_delayed", SUB), 8)
        self.assertEqual(self.value(samples, "pulsar_subscription_unacked_messages", SUB), 2)
        self.assertEqual(self.value(samples, "pulsar_subscription_consumers_count", SUB), 1)
        self.assertEqual(self.value(samples, "pulsar_subscription_blocked_on_unacked_messages", SUB), 0)
        self.assertEqual(self.value(samples, "pulsar_subscription_delayed", SUB), 0)
        producer.close()

    def test_blocked_on_unacked(self):
        """maxUnackedMessagesPerSubscription=3 passed: dispatch stops and the metric says blocked."""
        producer = self.producer_client(5)
        consumer = self.harness.client()
        self.subscribe(consumer, 1, kind=Sub.Shared, permits=20)
        sent = len(messages(consumer.received()))
        self.assertGreaterEqual(sent, 3)
        self.send(producer, 5)
        self.assertEqual(messages(consumer.received()), [])   # blocked: nothing more is read
        samples = self.scrape()
        self.assertEqual(self.value(samples, "pulsar_subscription_blocked_on_unacked_messages", SUB), 1)
        self.assertEqual(self.value(samples, "pulsar_subscription_unacked_messages", SUB), sent)

    def test_rates_between_scrapes(self):
        """The first scrape says 0; 6 dispatched (4 acked, 2 redelivered) in 10 s after it."""
        producer = self.producer_client()
        consumer = self.harness.client()
        self.subscribe(consumer, 1, kind=Sub.Shared, permits=0)
        first = self.scrape()
        self.assertEqual(self.value(first, "pulsar_subscription_msg_rate_out", SUB), 0.0)
        self.clock.advance(10)
        for seq in range(4):
            self.send(producer, seq, payload=b"x" * 100)
        consumer.send(T(type=T.FLOW, flow=api.CommandFlow(consumer_id=1, messagePermits=6)))
        got = messages(consumer.received())
        ids = [c.message.message_id for c, _ in got]
        self.redeliver(consumer, 1, ids[2:])
        self.ack(consumer, 1, ids[:2] + [c.message.message_id for c, _ in messages(consumer.received())])
        samples = self.scrape()
        self.assertEqual(self.value(samples, "pulsar_subscription_msg_rate_out", SUB), 0.6)
        self.assertEqual(self.value(samples, "pulsar_subscription_msg_rate_redeliver", SUB), 0.2)
        self.assertEqual(self.value(samples, "pulsar_subscription_msg_ack_rate", SUB), 0.4)
        throughput = self.value(samples, "pulsar_subscription_msg_throughput_out", SUB)
        self.assertTrue(60.0 <= throughput <= 80.0, throughput)   # 6 payloads of 100 B + metadata, /10 s
        # A second scrape at the same instant repeats the rates rather than dividing by zero.
        again = self.scrape()
        self.assertEqual(self.value(again, "pulsar_subscription_msg_rate_out", SUB), 0.6)


class DelayedMetricsTests(MetricsCase):
    def test_delayed_messages(self):
        """A message delivered in the future is delayed and not in back_log_no_delayed."""
        producer = self.producer_client()
        consumer = self.harness.client()
        self.subscribe(consumer, 1, kind=Sub.Shared, permits=10)
        self.send(producer, 0, deliver_at_time=int(self.clock.seconds() * 1000) + 60_000)
        self.send(producer, 1)
        samples = self.scrape()
        self.assertEqual(self.value(samples, "pulsar_subscription_delayed", SUB), 1)
        self.assertEqual(self.value(samples, "pulsar_subscription_back_log", SUB), 2)
        self.assertEqual(self.value(samples, "pulsar_subscription_back_log_no_delayed", SUB), 1)


class ConsumerLevelTests(MetricsCase):
    def test_off_by_default(self):
        """Without exposeConsumerLevelMetricsInPrometheus no pulsar_consumer_* series per consumer."""
        self.producer_client(1)
        self.subscribe(self.harness.client(), 1, permits=10)
        names = {name for name, _ in self.scrape()}
        self.assertNotIn("pulsar_consumer_unacked_messages", names)


class ConsumerLevelOnTests(MetricsCase):
    config = {"exposeConsumerLevelMetricsInPrometheus": True}

    def test_per_consumer_series(self):
        """On: one series per consumer, labelled with its name and id."""
        self.producer_client(3)
        consumer = self.harness.client()
        self.subscribe(consumer, 7, kind=Sub.Shared, permits=10, name="alice")
        labels = dict(SUB, consumer_name="alice", consumer_id="7")
        samples = self.scrape()
        self.assertEqual(self.value(samples, "pulsar_consumer_unacked_messages", labels), 3)
        self.assertEqual(self.value(samples, "pulsar_consumer_available_permits", labels), 7)
        self.assertEqual(self.value(samples, "pulsar_consumer_blocked_on_unacked_messages", labels), 0)
        self.assertEqual(self.value(samples, "pulsar_consumer_msg_rate_out", labels), 0.0)
        self.assertEqual(self.value(samples, "pulsar_consumer_msg_ack_rate", labels), 0.0)
        # One family per name in the exposition (the topic-level ack rate shares this one).
        text = self.page.render_now().decode()
        types = [line for line in text.splitlines() if line.startswith("# TYPE ")]
        self.assertEqual(len(types), len(set(types)))


class StorageAndBrokerMetricsTests(MetricsCase):
    def test_storage_rates_and_backlog_size(self):
        """5 entries written and read in 10 s: write and read rates 0.5/s; backlog bytes > 0."""
        self.scrape()
        self.clock.advance(10)
        self.producer_client(5)
        consumer = self.harness.client()
        self.subscribe(consumer, 1, permits=10)
        self.assertEqual(len(messages(consumer.received())), 5)
        samples = self.scrape()
        self.assertEqual(self.value(samples, "pulsar_storage_write_rate", TOPIC_LABELS), 0.5)
        self.assertEqual(self.value(samples, "pulsar_storage_read_rate", TOPIC_LABELS), 0.5)
        topic = self.topic_object()
        self.assertEqual(self.value(samples, "pulsar_storage_backlog_size", TOPIC_LABELS),
                         topic.backlog_size())
        self.assertGreater(topic.backlog_size(), 0)
        self.assertEqual(self.value(samples, "pulsar_storage_logical_size", TOPIC_LABELS),
                         topic.storage_size())
        self.assertEqual(self.value(samples, "pulsar_broker_storage_write_rate", CLUSTER), 0.5)

    def test_broker_aggregates(self):
        """Two topics, two producers, one consumer: the pulsar_broker_* totals add up."""
        self.producer_client(3)
        other = self.harness.client()
        self.create_producer(other, topic="persistent://public/default/other")
        self.send(other, 0)
        self.subscribe(self.harness.client(), 1, permits=0)
        samples = self.scrape()
        for name, expected in (("topics_count", 2), ("producers_count", 2), ("consumers_count", 1),
                               ("subscriptions_count", 1), ("msg_backlog", 3)):
            self.assertEqual(self.value(samples, f"pulsar_broker_{name}", CLUSTER), expected, name)
        total = sum(t.storage_size() for t in self.harness.broker.topics.values())
        self.assertEqual(self.value(samples, "pulsar_broker_storage_size", CLUSTER), total)


class ManagedLedgerMetricsTests(MetricsCase):
    ML = {"cluster": "standalone", "namespace": NS}

    def test_adds_counted(self):
        """4 adds: AddEntrySucceed 4, all in the first latency and size buckets; backlog 4."""
        self.producer_client(4)
        self.subscribe(self.harness.client(), 1, permits=0)
        samples = self.scrape()
        self.assertEqual(self.value(samples, "pulsar_ml_count", CLUSTER), 1)
        self.assertEqual(self.value(samples, "pulsar_ml_AddEntrySucceed", self.ML), 4)
        self.assertEqual(self.value(samples, "pulsar_ml_AddEntryErrors", self.ML), 0)
        self.assertEqual(self.value(samples, "pulsar_ml_NumberOfMessagesInBacklog", self.ML), 4)
        self.assertEqual(self.value(samples, "pulsar_ml_AddEntryLatencyBuckets",
                                    dict(self.ML, quantile="0.0_0.5")), 4)
        self.assertEqual(self.value(samples, "pulsar_ml_EntrySizeBuckets",
                                    dict(self.ML, quantile="0.0_128.0")), 4)
        self.assertEqual(self.value(samples, "pulsar_ml_EntrySizeBuckets_OVERFLOW", self.ML), 0)
        self.assertEqual(self.value(samples, "pulsar_ml_StoredMessagesSize", self.ML),
                         self.topic_object().storage_size())

    @defer.inlineCallbacks
    def test_add_error_counted(self):
        """A failed write of the ledger counts in AddEntryErrors, not in AddEntrySucceed."""
        self.producer_client(1)
        ml = self.topic_object().ledger
        self.harness.ledger_client.fail_next_adds(1)
        d = ml.add_entry(b"entry")
        self.harness.pump()
        yield self.assertFailure(d, Exception)
        samples = self.scrape()
        self.assertEqual(self.value(samples, "pulsar_ml_AddEntryErrors", self.ML), 1)
        self.assertEqual(self.value(samples, "pulsar_ml_AddEntrySucceed", self.ML), 1)

    def test_reads_counted(self):
        """A consumer reading 3 entries: ReadEntriesSucceeded >= 1, entries read 3 at 0.3/s."""
        self.producer_client(3)
        self.scrape()
        self.clock.advance(10)
        consumer = self.harness.client()
        self.subscribe(consumer, 1, permits=10)
        self.assertEqual(len(messages(consumer.received())), 3)
        samples = self.scrape()
        self.assertGreaterEqual(self.value(samples, "pulsar_ml_ReadEntriesSucceeded", self.ML), 1)
        self.assertEqual(self.value(samples, "pulsar_ml_ReadEntriesRate", self.ML), 0.3)
        self.assertEqual(self.value(samples, "pulsar_ml_ReadEntriesErrors", self.ML), 0)


class ConnectionAndLookupMetricsTests(MetricsCase):
    BROKER = {"cluster": "standalone", "broker": "localhost"}

    def lookup(self, client, topic, request_id):
        client.send(T(type=T.LOOKUP, lookupTopic=api.CommandLookupTopic(topic=topic,
                                                                        request_id=request_id)))
        return client.commands()

    def test_connections(self):
        """Three connections made, one closed: active 2, created 3, closed 1."""
        clients = [self.harness.client() for _ in range(3)]
        clients[0].close()
        samples = self.scrape()
        self.assertEqual(self.value(samples, "pulsar_active_connections", self.BROKER), 2)
        self.assertEqual(self.value(samples, "pulsar_connection_created_total_count", self.BROKER), 3)
        self.assertEqual(self.value(samples, "pulsar_connection_create_success_count", self.BROKER), 3)
        self.assertEqual(self.value(samples, "pulsar_connection_closed_total_count", self.BROKER), 1)

    def test_lookups(self):
        """Two answered lookups and one refused: answers 2, failures 1, none pending."""
        client = self.harness.client()
        [answer] = self.lookup(client, TOPIC, 1)
        self.assertEqual(answer.type, T.LOOKUP_RESPONSE)
        self.lookup(client, TOPIC, 2)
        [refused] = self.lookup(client, "persistent://no-such-tenant/ns/t", 3)
        self.assertEqual(refused.lookupTopicResponse.response, api.CommandLookupTopicResponse.Failed)
        samples = self.scrape()
        self.assertEqual(self.value(samples, "pulsar_broker_lookup_answers", CLUSTER), 2)
        self.assertEqual(self.value(samples, "pulsar_broker_lookup_failures", CLUSTER), 1)
        self.assertEqual(self.value(samples, "pulsar_broker_lookup_redirects", CLUSTER), 0)
        self.assertEqual(self.value(samples, "pulsar_broker_lookup_pending_requests", CLUSTER), 0)
        self.assertEqual(self.value(samples, "pulsar_broker_lookup_count", CLUSTER), 3)
        self.assertEqual(self.value(samples, "pulsar_broker_lookup", dict(CLUSTER, quantile="0.99")),
                         0.0)   # no time passes on the test clock


class ExpositionTests(MetricsCase):
    def test_every_dashboard_family_present(self):
        """The families Pulsar's dashboards query all appear (HELP/TYPE even without series)."""
        self.producer_client(1)
        self.subscribe(self.harness.client(), 1, permits=1)
        text = self.page.render_now().decode()
        families = {f.name for f in text_string_to_metric_families(text)}
        types = [line for line in text.splitlines() if line.startswith("# TYPE ")]
        self.assertEqual(len(types), len(set(types)))
        for name in ("pulsar_subscription_back_log", "pulsar_subscription_msg_rate_out",
                     "pulsar_subscription_msg_throughput_out", "pulsar_subscription_unacked_messages",
                     "pulsar_subscription_delayed", "pulsar_subscription_blocked_on_unacked_messages",
                     "pulsar_subscription_msg_rate_redeliver", "pulsar_storage_backlog_size",
                     "pulsar_storage_write_rate", "pulsar_storage_read_rate",
                     "pulsar_broker_topics_count", "pulsar_broker_rate_in", "pulsar_broker_rate_out",
                     "pulsar_broker_throughput_in", "pulsar_broker_throughput_out",
                     "pulsar_broker_msg_backlog", "pulsar_ml_AddEntryBytesRate",
                     "pulsar_ml_AddEntryErrors", "pulsar_ml_AddEntryMessagesRate",
                     "pulsar_ml_AddEntrySucceed", "pulsar_ml_NumberOfMessagesInBacklog",
                     "pulsar_ml_ReadEntriesRate", "pulsar_ml_ReadEntriesErrors",
                     "pulsar_ml_ReadEntriesSucceeded", "pulsar_ml_StoredMessagesSize",
                     "pulsar_ml_AddEntryLatencyBuckets", "pulsar_active_connections",
                     "pulsar_connection_created_total_count", "pulsar_connection_closed_total_count",
                     "pulsar_broker_lookup_answers", "pulsar_broker_lookup_failures",
                     "pulsar_broker_lookup_redirects", "pulsar_broker_lookup_pending_requests",
                     "pulsar_broker_lookup", "pulsar_rate_in", "pulsar_msg_backlog"):
            self.assertIn(name, families)


class BrokerCountersTests(MetricsCase):
    def test_redirect_counted(self):
        """A lookup answered with another broker's URL (``redirect``) counts as a redirect."""
        class Redirect(tuple):
            redirect = True
        counters = self.harness.broker.counters
        started = counters.lookup_started()
        self.assertEqual(self.value(self.scrape(), "pulsar_broker_lookup_pending_requests", CLUSTER), 1)
        self.clock.advance(0.25)
        counters.lookup_finished(started, Redirect(("pulsar://other:6650", "")))
        samples = self.scrape()
        self.assertEqual(self.value(samples, "pulsar_broker_lookup_redirects", CLUSTER), 1)
        self.assertEqual(self.value(samples, "pulsar_broker_lookup_answers", CLUSTER), 0)
        self.assertEqual(self.value(samples, "pulsar_broker_lookup_pending_requests", CLUSTER), 0)
        self.assertEqual(self.value(samples, "pulsar_broker_lookup_sum", CLUSTER), 250.0)
        self.assertEqual(self.value(samples, "pulsar_broker_lookup", dict(CLUSTER, quantile="1.0")), 250.0)


class NamespaceLevelTests(MetricsCase):
    config = {"exposeTopicLevelMetricsInPrometheus": False}

    def test_summed_per_namespace(self):
        """Topic level off: no topic label, two topics' counts summed, subscriptions left out."""
        self.producer_client(3)
        other = self.harness.client()
        self.create_producer(other, topic="persistent://public/default/other")
        self.send(other, 0)
        self.subscribe(self.harness.client(), 1, permits=0)
        samples = self.scrape()
        ns = {"cluster": "standalone", "namespace": NS}
        self.assertEqual(self.value(samples, "pulsar_in_messages_total", ns), 4)
        self.assertEqual(self.value(samples, "pulsar_producers_count", ns), 2)
        self.assertEqual(self.value(samples, "pulsar_msg_backlog", ns), 3)
        self.assertEqual(self.value(samples, "pulsar_storage_write_latency_count", ns), 4)
        self.assertEqual(self.value(samples, "pulsar_subscription_delayed", ns), 0)
        self.assertFalse([k for k in samples if dict(k[1]).get("topic")])
        self.assertNotIn("pulsar_subscription_back_log", {name for name, _ in samples})
        self.assertEqual(self.value(samples, "pulsar_broker_topics_count", CLUSTER), 2)


class SchemaMetricsTests(MetricsCase):
    def test_compatibility_checks_counted(self):
        """One compatible new version and one refused: each counted for the namespace."""
        import json
        def avro(*fields):
            return json.dumps({"type": "record", "name": "U", "fields": list(fields)}).encode()
        client = self.harness.client()
        for producer_id, data in ((1, avro({"name": "a", "type": "string"})),
                                  (2, avro({"name": "a", "type": "string"},
                                           {"name": "b", "type": "int", "default": 0})),
                                  (3, avro({"name": "a", "type": "int"}))):
            request = api.CommandProducer(topic=TOPIC, producer_id=producer_id, request_id=producer_id)
            request.schema.CopyFrom(api.Schema(name="s", type=api.Schema.Avro, schema_data=data))
            client.send(T(type=T.PRODUCER, producer=request))
        samples = self.scrape()
        ns = {"cluster": "standalone", "namespace": NS}
        # The first version meets no existing one, the second passes FULL, the third is refused.
        self.assertEqual(self.value(samples, "pulsar_schema_compatible_total", ns), 2)
        self.assertEqual(self.value(samples, "pulsar_schema_incompatible_total", ns), 1)


class OffloadedSizeMetricTests(MetricsCase):
    def test_offloaded_size_of_the_ledger(self):
        """pulsar_storage_offloaded_size is the managed ledger's offloaded_size(), per topic."""
        self.producer_client(2)
        topic = self.topic_object()
        ledger = topic.ledger

        class Offloading:
            def __getattr__(self, name):
                return getattr(ledger, name)

            def offloaded_size(self):
                return 1234
        self.harness.broker.topics[TOPIC] = _with_ledger(topic, Offloading())
        self.addCleanup(self.harness.broker.topics.__setitem__, TOPIC, topic)
        samples = self.scrape()
        self.assertEqual(self.value(samples, "pulsar_storage_offloaded_size", TOPIC_LABELS), 1234)


def _with_ledger(topic, ledger):
    """``topic`` seen with another ``ledger`` (the topic class has __slots__)."""
    class Topic:
        def __getattr__(self, name):
            return ledger if name == "ledger" else getattr(topic, name)
    return Topic()


class OffloaderMetricTests(MetricsCase):
    def test_offloader_counters_and_rates(self):
        """brk_ledgeroffloader_*: a topic that offloaded has its errors as counters and its bytes
        copied and read back as rates between two scrapes; a topic that never did has none."""
        from pulsar_twisted.mledger import offloads
        self.producer_client(2)
        self.assertFalse([k for k in self.scrape() if "offloader" in k[0]])
        state = offloads.state_of(self.topic_object().ledger)
        state.offload_errors, state.write_errors, state.read_errors = 3, 2, 1
        self.scrape()
        state.offload_bytes += 5000
        state.read_bytes += 1000
        self.clock.advance(10)
        samples = self.scrape()
        # Counters are exposed with the _total suffix, as Pulsar's Java client writes them.
        for name, value in (("offload_error_total", 3), ("write_storage_error_total", 2),
                            ("read_offload_error_total", 1), ("offload_rate", 500),
                            ("read_offload_rate", 100)):
            self.assertEqual(self.value(samples, f"brk_ledgeroffloader_{name}", TOPIC_LABELS), value)

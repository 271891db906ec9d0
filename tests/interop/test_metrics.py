"""
Interop: /metrics of a real standalone after the official client published, consumed and acked:
topic, subscription, managed-ledger, connection and lookup families count what happened, and the
in-process bookie's BookKeeper families are on the same page (as on Pulsar's standalone).
"""

import urllib.request

from prometheus_client.parser import text_string_to_metric_families

from tests.interop.test_core import InteropCase


class MetricsInteropTests(InteropCase):
    standalone_config = {"journalSyncData": "false"}

    def scrape(self) -> dict:
        url = self.standalone.web_service_url + "/metrics"
        with urllib.request.urlopen(url, timeout=10) as response:
            text = response.read().decode()
        samples = {}
        for family in text_string_to_metric_families(text):
            for s in family.samples:
                samples[(s.name, frozenset(s.labels.items()))] = s.value
        return samples

    def test_counts_what_the_client_did(self):
        """5 sent without batching, received and acked: the page says so, bookie included."""
        topic = self.topic("metrics-")
        full = f"persistent://public/default/{topic}"
        consumer = self.client.subscribe(topic, "s")
        producer = self.client.create_producer(topic, batching_enabled=False)
        self.publish(producer, 5)
        for message in self.receive_all(consumer, 5):
            consumer.acknowledge(message)
        producer.flush()
        samples = self.scrape()
        labels = {"cluster": "standalone", "namespace": "public/default", "topic": full}
        sub = frozenset(dict(labels, subscription="s").items())
        self.assertEqual(samples[("pulsar_in_messages_total", frozenset(labels.items()))], 5)
        self.assertEqual(samples[("pulsar_subscription_consumers_count", sub)], 1)
        ml = frozenset({"cluster": "standalone", "namespace": "public/default"}.items())
        self.assertGreaterEqual(samples[("pulsar_ml_AddEntrySucceed", ml)], 5)
        cluster = frozenset({"cluster": "standalone"}.items())
        self.assertGreaterEqual(samples[("pulsar_broker_lookup_answers", cluster)], 2)
        self.assertGreaterEqual(samples[("pulsar_broker_topics_count", cluster)], 1)
        connections = [v for (name, _), v in samples.items() if name == "pulsar_active_connections"]
        self.assertGreaterEqual(connections[0], 1)
        self.assertEqual(samples[("bookie_SERVER_STATUS", frozenset())], 1)
        self.assertGreater(samples[("bookie_WRITE_BYTES", frozenset())], 0)
        journal = frozenset({"success": "true"}.items())
        self.assertGreaterEqual(samples[("bookie_journal_JOURNAL_ADD_ENTRY_count", journal)], 5)

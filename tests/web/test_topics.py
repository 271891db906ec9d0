"""Admin REST API v2 over HTTP: topics, partitions, stats, subscriptions, lookup, /metrics."""

from twisted.internet import defer

from pulsar_twisted.proto import PulsarApi_pb2 as api
from tests.web.support import WebTestCase, settle

V2 = "/admin/v2"
P = f"{V2}/persistent/public/default"
TOPIC = "persistent://public/default/t"


class TopicTests(WebTestCase):
    @defer.inlineCallbacks
    def test_create_list_delete(self):
        """PUT creates (409 twice), GET lists, DELETE removes the managed ledger (404 after)."""
        yield self.expect("PUT", f"{P}/t", 204)
        yield self.expect("PUT", f"{P}/t", 409)
        self.assertEqual((yield self.expect("GET", P, 200)), [TOPIC])
        yield self.expect("DELETE", f"{P}/t", 204)
        self.assertEqual((yield self.expect("GET", P, 200)), [])
        yield self.expect("DELETE", f"{P}/t", 404)
        self.assertEqual((yield self.harness.ml_factory.list_names()), [])

    @defer.inlineCallbacks
    def test_create_without_auto_creation(self):
        """Created topics can be used even when the broker does not auto-create."""
        self.harness.config.allowAutoTopicCreation = False
        yield self.expect("PUT", f"{P}/made", 204)
        yield self.producer("persistent://public/default/made")

    @defer.inlineCallbacks
    def test_delete_busy_topic(self):
        """A topic with a connected producer: 412, unless ?force=true."""
        yield self.producer(TOPIC)
        yield self.expect("DELETE", f"{P}/t", 412)
        yield self.expect("DELETE", f"{P}/t?force=true", 204)
        self.assertNotIn(TOPIC, self.broker.topics)

    @defer.inlineCallbacks
    def test_bad_names(self):
        yield self.expect("PUT", f"{V2}/persistent/public/ghost/t", 404)
        yield self.expect("PUT", f"{V2}/persistent/bad%20tenant/default/t", 412)
        yield self.expect("GET", f"{V2}/persistent/public/default/ghost/stats", 404)
        yield self.expect("GET", f"{V2}/persistent/public/default/t%20x/stats", 404)
        yield self.expect("PUT", f"{V2}/other-domain/public/default/t", 404)
        self.assertEqual(self.flushLoggedErrors(), [])

    @defer.inlineCallbacks
    def test_non_persistent(self):
        np = f"{V2}/non-persistent/public/default"
        yield self.expect("PUT", f"{np}/n", 204)
        self.assertEqual((yield self.expect("GET", np, 200)), ["non-persistent://public/default/n"])
        stats = yield self.expect("GET", f"{np}/n/stats", 200)
        self.assertEqual(stats["storageSize"], 0)
        yield self.expect("GET", f"{np}/n/internalStats", 405)
        yield self.expect("DELETE", f"{np}/n", 204)

    @defer.inlineCallbacks
    def test_unload_reloads(self):
        yield self.expect("PUT", f"{P}/t", 204)
        first = self.broker.topics[TOPIC]
        yield self.expect("PUT", f"{P}/t/unload", 204)
        self.assertNotIn(TOPIC, self.broker.topics)
        yield self.expect("GET", f"{P}/t/stats", 200)
        self.assertIsNot(self.broker.topics[TOPIC], first)

    @defer.inlineCallbacks
    def test_compaction_trigger_and_status(self):
        """PUT .../compaction starts a run; GET .../compaction reports it (NOT_RUN before)."""
        yield self.expect("PUT", f"{P}/t", 204)
        body = yield self.expect("GET", f"{P}/t/compaction", 200)
        self.assertEqual(body["status"], "NOT_RUN")
        yield self.expect("PUT", f"{P}/t/compaction", 204)
        for _ in range(100):  # the run is in the background on the real reactor
            body = yield self.expect("GET", f"{P}/t/compaction", 200)
            if body["status"] != "RUNNING":
                break
            from twisted.internet import reactor, task
            yield task.deferLater(reactor, 0.01, lambda: None)
        self.assertEqual(body["status"], "SUCCESS")

    @defer.inlineCallbacks
    def test_terminate(self):
        """Terminate answers the last message id; publishing afterwards fails."""
        client = yield self.producer(TOPIC)
        receipts = yield self.publish(client, 2)
        last = yield self.expect("POST", f"{P}/t/terminate", 200)
        self.assertEqual((last["ledgerId"], last["entryId"]),
                         (receipts[-1].message_id.ledgerId, receipts[-1].message_id.entryId))
        self.assertTrue(self.broker.topics[TOPIC].ledger.is_terminated)

    @defer.inlineCallbacks
    def test_last_message_id(self):
        client = yield self.producer(TOPIC)
        receipts = yield self.publish(client, 3)
        last = yield self.expect("GET", f"{P}/t/lastMessageId", 200)
        self.assertEqual(last, {"ledgerId": receipts[-1].message_id.ledgerId,
                                "entryId": receipts[-1].message_id.entryId, "partitionIndex": -1})


class PartitionedTests(WebTestCase):
    @defer.inlineCallbacks
    def test_create_get_update_delete(self):
        yield self.expect("PUT", f"{P}/pt/partitions", 204, 3)
        self.assertEqual((yield self.expect("GET", f"{P}/pt/partitions", 200)), {"partitions": 3})
        self.assertEqual((yield self.expect("GET", f"{P}/partitioned", 200)), ["persistent://public/default/pt"])
        self.assertEqual(len((yield self.expect("GET", P, 200))), 3)  # partitions created eagerly
        yield self.expect("PUT", f"{P}/pt/partitions", 409, 3)
        yield self.expect("PUT", f"{P}/pt", 409)
        yield self.expect("POST", f"{P}/pt/partitions", 409, 2)
        yield self.expect("POST", f"{P}/pt/partitions", 204, 5)
        self.assertEqual((yield self.expect("GET", f"{P}/pt/partitions", 200)), {"partitions": 5})
        yield self.expect("DELETE", f"{P}/pt", 409)
        yield self.expect("DELETE", f"{P}/pt/partitions", 204)
        self.assertEqual((yield self.expect("GET", f"{P}/pt/partitions", 200)), {"partitions": 0})
        self.assertEqual((yield self.expect("GET", P, 200)), [])

    @defer.inlineCallbacks
    def test_bad_partitions(self):
        yield self.expect("PUT", f"{P}/pt/partitions", 406, 0)
        yield self.expect("PUT", f"{P}/pt/partitions", 400, "three")
        yield self.expect("PUT", f"{P}/pt/partitions", 400, raw=b"")
        yield self.expect("POST", f"{P}/ghost/partitions", 404, 4)
        yield self.expect("DELETE", f"{P}/ghost/partitions", 404)
        yield self.expect("GET", f"{V2}/persistent/public/ghost/t/partitions", 404)

    @defer.inlineCallbacks
    def test_partitioned_stats(self):
        yield self.expect("PUT", f"{P}/pt/partitions", 204, 2)
        client = yield self.producer("persistent://public/default/pt-partition-1")
        yield self.publish(client, 4)
        stats = yield self.expect("GET", f"{P}/pt/partitioned-stats", 200)
        self.assertEqual(stats["msgInCounter"], 4)
        self.assertEqual(stats["metadata"], {"partitions": 2})
        self.assertEqual(sorted(stats["partitions"]), ["persistent://public/default/pt-partition-0",
                                                       "persistent://public/default/pt-partition-1"])
        yield self.expect("GET", f"{P}/pt/stats", 404)
        yield self.expect("GET", f"{P}/t/partitioned-stats", 404)

    @defer.inlineCallbacks
    def test_subscription_on_every_partition(self):
        yield self.expect("PUT", f"{P}/pt/partitions", 204, 2)
        yield self.expect("PUT", f"{P}/pt/subscription/s", 204)
        self.assertEqual((yield self.expect("GET", f"{P}/pt/subscriptions", 200)), ["s"])
        self.assertEqual((yield self.expect("GET", f"{P}/pt-partition-0/subscriptions", 200)), ["s"])


class StatsTests(WebTestCase):
    @defer.inlineCallbacks
    def test_topic_stats(self):
        """Counters, storage, publishers and subscriptions with backlog and consumers."""
        client = yield self.producer(TOPIC, name="prod")
        yield self.consumer(TOPIC, "sub", permits=0)
        yield self.publish(client, 5)
        stats = yield self.expect("GET", f"{P}/t/stats", 200)
        self.assertEqual(stats["msgInCounter"], 5)
        self.assertGreater(stats["bytesInCounter"], 0)
        self.assertGreater(stats["storageSize"], 0)
        self.assertEqual(stats["averageMsgSize"], stats["bytesInCounter"] / 5)
        self.assertEqual([p["producerName"] for p in stats["publishers"]], ["prod"])
        sub = stats["subscriptions"]["sub"]
        self.assertEqual(sub["msgBacklog"], 5)
        self.assertEqual(sub["type"], "Exclusive")
        self.assertEqual(len(sub["consumers"]), 1)
        for key in ("msgRateIn", "msgRateOut", "msgThroughputIn", "msgThroughputOut"):
            self.assertIn(key, stats)

    @defer.inlineCallbacks
    def test_counters_survive_producer_leaving(self):
        """msgInCounter keeps what a producer published after it disconnects."""
        client = yield self.producer(TOPIC)
        yield self.publish(client, 3)
        yield self.expect("GET", f"{P}/t/stats", 200)
        client.close()
        self.clients.remove(client)
        yield settle()
        stats = yield self.expect("GET", f"{P}/t/stats", 200)
        self.assertEqual(stats["publishers"], [])
        self.assertEqual(stats["msgInCounter"], 3)

    @defer.inlineCallbacks
    def test_internal_stats(self):
        client = yield self.producer(TOPIC)
        yield self.consumer(TOPIC, "sub")
        receipts = yield self.publish(client, 3)
        stats = yield self.expect("GET", f"{P}/t/internalStats", 200)
        self.assertEqual(stats["numberOfEntries"], 3)
        self.assertGreater(stats["totalSize"], 0)
        last = receipts[-1].message_id
        self.assertEqual(stats["lastConfirmedEntry"], f"{last.ledgerId}:{last.entryId}")
        self.assertEqual(sum(l["entries"] for l in stats["ledgers"]), 3)
        self.assertEqual(stats["cursors"]["sub"]["markDeletePosition"], f"{last.ledgerId}:-1")

    @defer.inlineCallbacks
    def test_stats_load_topic_on_demand(self):
        """A persistent topic that exists but is not loaded is loaded to answer."""
        client = yield self.producer(TOPIC)
        yield self.expect("PUT", f"{P}/t/subscription/keep", 204)  # no subscription: data trimmed
        yield self.publish(client, 2)
        yield self.expect("PUT", f"{P}/t/unload", 204)
        stats = yield self.expect("GET", f"{P}/t/internalStats", 200)
        self.assertEqual(stats["numberOfEntries"], 2)

    def test_rates_from_samples(self):
        """Rates are counter deltas over the sampling period."""
        from twisted.internet import task
        from pulsar_twisted.broker.admin.service import AdminService
        clock = task.Clock()
        admin = AdminService(self.broker, self.harness.store, self.harness.config, clock, stats_interval=10)
        d = self._rates(admin, clock)
        return d

    @defer.inlineCallbacks
    def _rates(self, admin, clock):
        client = yield self.producer(TOPIC)
        admin.startService()
        self.addCleanup(admin.stopService)
        yield self.publish(client, 20)
        clock.advance(10)
        stats = admin.topic_stats(self.broker.topics[TOPIC])
        self.assertEqual(stats["msgRateIn"], 2.0)
        self.assertGreater(stats["msgThroughputIn"], 0)
        clock.advance(10)
        self.assertEqual(admin.topic_stats(self.broker.topics[TOPIC])["msgRateIn"], 0.0)


class SubscriptionTests(WebTestCase):
    @defer.inlineCallbacks
    def setUp(self):
        yield super().setUp()
        self.prod = yield self.producer(TOPIC)
        self.receipts = yield self.publish(self.prod, 5)

    def backlog(self, sub="s"):
        return self.broker.topics[TOPIC].subscriptions[sub].backlog()

    @defer.inlineCallbacks
    def test_create_at_latest_and_at_id(self):
        yield self.expect("PUT", f"{P}/t/subscription/s", 204)
        self.assertEqual(self.backlog(), 0)
        yield self.expect("PUT", f"{P}/t/subscription/s", 409)
        first = self.receipts[0].message_id
        yield self.expect("PUT", f"{P}/t/subscription/s2", 204, {"ledgerId": first.ledgerId, "entryId": first.entryId})
        self.assertEqual(self.backlog("s2"), 5)
        self.assertEqual(sorted((yield self.expect("GET", f"{P}/t/subscriptions", 200))), ["s", "s2"])
        yield self.expect("PUT", f"{P}/t/subscription/s3", 400, {"ledgerId": "x"})

    @defer.inlineCallbacks
    def test_delete(self):
        yield self.consumer(TOPIC, "s")
        yield self.expect("DELETE", f"{P}/t/subscription/s", 412)
        yield self.expect("DELETE", f"{P}/t/subscription/s?force=true", 204)
        self.assertEqual((yield self.expect("GET", f"{P}/t/subscriptions", 200)), [])
        yield self.expect("DELETE", f"{P}/t/subscription/s", 404)

    @defer.inlineCallbacks
    def test_skip_and_skip_all(self):
        first = self.receipts[0].message_id
        yield self.expect("PUT", f"{P}/t/subscription/s", 204, {"ledgerId": first.ledgerId, "entryId": first.entryId})
        yield self.expect("POST", f"{P}/t/subscription/s/skip/2", 204)
        self.assertEqual(self.backlog(), 3)
        yield self.expect("POST", f"{P}/t/subscription/s/skip/x", 400)
        yield self.expect("POST", f"{P}/t/subscription/s/skip_all", 204)
        self.assertEqual(self.backlog(), 0)
        yield self.expect("POST", f"{P}/t/subscription/ghost/skip_all", 404)

    @defer.inlineCallbacks
    def test_reset_cursor(self):
        yield self.expect("PUT", f"{P}/t/subscription/s", 204)
        third = self.receipts[2].message_id
        yield self.expect("POST", f"{P}/t/subscription/s/resetcursor", 204,
                          {"ledgerId": third.ledgerId, "entryId": third.entryId})
        self.assertEqual(self.backlog(), 3)
        yield self.expect("POST", f"{P}/t/subscription/s/resetcursor/0", 204)
        self.assertEqual(self.backlog(), 5)
        # publish_time of message i is 1000 + i (support.message): from 1003 on, two are left.
        yield self.expect("POST", f"{P}/t/subscription/s/resetcursor/1003", 204)
        self.assertEqual(self.backlog(), 2)
        yield self.expect("POST", f"{P}/t/subscription/s/resetcursor", 400, raw=b"nope")

    @defer.inlineCallbacks
    def test_expire_messages(self):
        """Messages published (publish_time 1000..1004 ms) long ago all expire."""
        first = self.receipts[0].message_id
        yield self.expect("PUT", f"{P}/t/subscription/s", 204, {"ledgerId": first.ledgerId, "entryId": first.entryId})
        yield self.expect("POST", f"{P}/t/subscription/s/expireMessages/10", 204)
        self.assertEqual(self.backlog(), 0)

    @defer.inlineCallbacks
    def test_peek(self):
        """position/N returns the N-th unacked message's payload with X-Pulsar-* headers."""
        first = self.receipts[0].message_id
        yield self.expect("PUT", f"{P}/t/subscription/s", 204, {"ledgerId": first.ledgerId, "entryId": first.entryId})
        code, body, response = yield self.get(f"{P}/t/subscription/s/position/2")
        self.assertEqual((code, body), (200, b"m1"))
        h = response.headers
        second = self.receipts[1].message_id
        self.assertEqual(h.getRawHeaders("X-Pulsar-Message-ID"), [f"{second.ledgerId}:{second.entryId}"])
        self.assertEqual(h.getRawHeaders("X-Pulsar-sequence-id"), ["1"])
        self.assertEqual(h.getRawHeaders("X-Pulsar-producer-name"), ["p"])
        yield self.expect("GET", f"{P}/t/subscription/s/position/9", 404)
        yield self.expect("GET", f"{P}/t/subscription/s/position/0", 412)

    @defer.inlineCallbacks
    def test_peek_properties_and_compression(self):
        import zlib
        client = yield self.producer("persistent://public/default/z", producer_id=1)
        yield self.expect("PUT", f"{P}/z/subscription/s", 204, {"ledgerId": -1, "entryId": -1})
        yield self.publish(client, 1, payload=zlib.compress(b"hello"), compression=api.ZLIB,
                           uncompressed_size=5, properties=[api.KeyValue(key="k", value="v")])
        code, body, response = yield self.get(f"{P}/z/subscription/s/position/1")
        self.assertEqual((code, body), (200, b"hello"))
        self.assertEqual(response.headers.getRawHeaders("X-Pulsar-PROPERTY-k"), ["v"])


class LookupTests(WebTestCase):
    @defer.inlineCallbacks
    def test_lookup(self):
        answer = yield self.expect("GET", "/lookup/v2/topic/persistent/public/default/t", 200)
        self.assertEqual(answer["brokerUrl"], "pulsar://localhost:6650")
        self.assertEqual(answer["httpUrl"], "http://127.0.0.1:8080")
        yield self.expect("GET", "/lookup/v2/topic/persistent/public/ghost/t", 404)
        yield self.expect("GET", "/lookup/v2/topic/bogus/public/default/t", 404)

    @defer.inlineCallbacks
    def test_partitioned_metadata_auto_creates_when_asked(self):
        self.harness.config.allowAutoTopicCreationType = "partitioned"
        self.harness.config.defaultNumPartitions = 2
        path = f"{P}/auto/partitions"
        self.assertEqual((yield self.expect("GET", path, 200)), {"partitions": 0})
        self.assertEqual((yield self.expect("GET", path + "?checkAllowAutoCreation=true", 200)),
                         {"partitions": 2})


class MetricsTests(WebTestCase):
    @defer.inlineCallbacks
    def test_topic_metrics(self):
        client = yield self.producer(TOPIC)
        yield self.consumer(TOPIC, "sub")
        yield self.publish(client, 4)
        code, text, response = yield self.get("/metrics")
        self.assertEqual(code, 200)
        self.assertTrue(response.headers.getRawHeaders("content-type")[0].startswith("text/plain"))
        text = text.decode()
        labels = 'cluster="standalone",namespace="public/default",topic="persistent://public/default/t"'
        for line in (f"pulsar_in_messages_total{{{labels}}} 4.0", f"pulsar_msg_backlog{{{labels}}} 4.0",
                     f"pulsar_producers_count{{{labels}}} 1.0", f"pulsar_consumers_count{{{labels}}} 1.0",
                     f"pulsar_subscriptions_count{{{labels}}} 1.0",
                     'pulsar_topics_count{cluster="standalone",namespace="public/default"} 1.0'):
            self.assertIn(line, text)
        for name in ("pulsar_rate_in", "pulsar_rate_out", "pulsar_throughput_in", "pulsar_throughput_out",
                     "pulsar_storage_size", "pulsar_out_messages_total", "process_cpu_seconds_total"):
            self.assertIn(f"\n{name}", text)

"""
Topic policies, from a review of the failure paths: each test failed before its fix.
"""

from twisted.internet import defer, reactor, task

from pulsar_twisted.broker.admin.topic_policies import TopicPoliciesAdmin
from pulsar_twisted.broker.topic import PersistentTopic
from pulsar_twisted.common.naming import parse_topic
from pulsar_twisted.metadata import layout
from pulsar_twisted.resources.topic_policies import TopicPoliciesResources
from tests.broker.test_policies import TOPIC, PolicyCase, Sub
from tests.broker.test_topic_policies import T as CMD
from tests.broker.test_topic_policies import TopicPoliciesCase
from tests.web.test_topic_policies import T, TopicPolicyCase


class RetentionAtOpen(PolicyCase):
    config = {"managedLedgerMaxEntriesPerLedger": 2, "managedLedgerMinLedgerRolloverTimeMinutes": 0}

    def test_topic_retention_survives_reload(self):
        """Topic retention unlimited over a namespace retention 0: a reload must not trim."""
        resources = TopicPoliciesResources(self.harness.store)
        client, pid, _ = self.producer()          # the namespace is now cached
        self.successResultOf(resources.update(parse_topic(TOPIC), {
            "retention_policies": {"retentionTimeInMinutes": -1, "retentionSizeInMB": -1}}))
        self.harness.pump()
        self.subscribe(client, "s", initial=Sub.Latest)
        self.publish(client, pid, 6)
        topic = self.topic()
        self.assertEqual(topic.ledger.config.retention_time_ms, -1)
        cursor = topic.subscriptions["s"].cursor
        self.successResultOf(cursor.mark_delete(topic.ledger.last_confirmed_entry()))
        self.harness.pump()
        kept = len(topic.ledger.ledgers_info())
        self.assertGreater(kept, 2)
        self.successResultOf(self.broker.unload_topic(TOPIC))
        self.harness.pump()
        opened = []
        real_open = self.harness.ml_factory.open

        def spy(name, config=None, *a, **kw):
            opened.append(config)
            return real_open(name, config, *a, **kw)
        self.harness.ml_factory.open = spy
        topic = self.successResultOf(self.broker.get_topic(TOPIC))
        self.harness.pump()
        default = self.harness.ml_factory.default_config
        self.assertGreaterEqual(len(topic.ledger.ledgers_info()), kept - 1,
                                "consumed ledgers trimmed at reload")
        self.assertEqual([(c or default).retention_time_ms for c in opened], [-1],
                         "ledger opened with the namespace's retention, not the topic's")


class ReadWindow(TopicPoliciesCase):
    def test_change_while_a_changed_topic_is_read_again(self):
        """A change notified while _read_topic_docs re-reads the topics changed during the
        namespace's read is lost (the _loading set is gone, _topic_docs not yet set)."""
        service = self.service
        service._topic_docs.clear()
        service._cache.clear()
        other = "persistent://public/default/other"
        held_ns = defer.Deferred()
        real_of_ns = service.topic_policies.of_namespace
        service.topic_policies.of_namespace = lambda namespace: held_ns
        real_get = service.topic_policies.read
        held_get = defer.Deferred()

        def get(name):
            if str(name) == TOPIC:
                return held_get
            return real_get(name)
        service.topic_policies.read = get
        d = service.policies_of("public/default")
        self.set_topic(max_producers_per_topic=4)        # changed during the read: read again
        service.topic_policies.of_namespace = real_of_ns
        held_ns.callback({})
        self.set_topic(topic=other, max_producers_per_topic=7)   # during the re-read of TOPIC
        real_get(parse_topic(TOPIC)).chainDeferred(held_get)
        service.topic_policies.read = real_get
        self.successResultOf(d)
        self.assertEqual(self.effective().max_producers_per_topic, 4)
        self.assertEqual(self.effective(other).max_producers_per_topic, 7,
                         "the other topic's policy, written during the re-read, was lost")


class LostUpdate(TopicPolicyCase):
    @defer.inlineCallbacks
    def test_two_backlog_quota_types_set_at_once(self):
        """Two admins set different quota types of one topic at the same time: each read the
        document before the other wrote, and the whole map is written back: one is lost."""
        gate = defer.Deferred()
        real = TopicPoliciesAdmin._topic_document
        waiting = []
        async def slow(area, name):
            document = await real(area, name)
            waiting.append(1)
            await gate          # both requests have read the document
            return document
        TopicPoliciesAdmin._topic_document = slow
        self.addCleanup(setattr, TopicPoliciesAdmin, "_topic_document", real)
        size = {"limitSize": 1000, "limitTime": -1, "policy": "producer_request_hold"}
        age = {"limitSize": -1, "limitTime": 60, "policy": "producer_request_hold"}
        d1 = self.expect("POST", f"{T}/backlogQuota?backlogQuotaType=destination_storage", 204, size)
        d2 = self.expect("POST", f"{T}/backlogQuota?backlogQuotaType=message_age", 204, age)
        yield _wait(self, lambda: len(waiting) >= 2)
        gate.callback(None)
        yield d1
        yield d2
        document = yield self.stored()
        self.assertEqual(sorted(document["backlog_quota_map"]), ["destination_storage", "message_age"])


def _wait(case, condition, timeout=5.0):
    async def run():
        waited = 0.0
        while not condition() and waited < timeout:
            await task.deferLater(reactor, 0.01, lambda: None)
            waited += 0.01
    return defer.Deferred.fromCoroutine(run())


class CorruptDocument(TopicPoliciesCase):
    def test_one_corrupt_topic_document_breaks_the_namespace(self):
        """A topic-policies node that is not JSON (an operator's zk write, a tool) must not stop
        every other topic of its namespace from loading (namespace policies are guarded so)."""
        bad = parse_topic("persistent://public/default/bad")
        self.successResultOf(self.harness.store.put(layout.topic_policies_path(bad), b"{not json"))
        self.harness.pump()
        self.service._topic_docs.clear()
        self.service._cache.clear()
        _, _, reply = self.producer(topic="persistent://public/default/good")
        self.assertEqual(reply.type, CMD.PRODUCER_SUCCESS, reply)


class LoadGap(TopicPoliciesCase):
    def test_change_while_the_topic_waits_to_be_ready(self):
        """A change notified while a loading topic recovers its deduplication state (after its
        policies were applied, before it is in broker.topics) never reaches it."""
        self.producer(topic="persistent://public/default/warm")     # namespace cached
        held = defer.Deferred()
        self.patch(PersistentTopic, "ready_now", lambda topic: False)
        self.patch(PersistentTopic, "wait_ready", lambda topic: held)
        d = self.broker.get_topic(TOPIC)
        self.assertNoResult(d)
        self.set_topic(max_producers_per_topic=1)       # another broker's admin writes
        held.callback(None)
        topic = self.successResultOf(d)
        self.assertEqual(topic.max_producers, 1, "topic serves with the policies of before")

"""
Replicated subscription status over the admin REST API (Pulsar's PersistentTopics
``.../subscription/{sub}/replicatedSubscriptionStatus``): POST a JSON boolean, GET the
``{topic: replicated}`` map, on plain and partitioned topics, with Pulsar's statuses.
"""

import treq
from twisted.internet import defer

from pulsar_twisted.broker.ownership import NotOwnedError
from pulsar_twisted.broker.subscription import PersistentSubscription
from pulsar_twisted.security import policy_table
from tests.web.support import WebTestCase

P = "/admin/v2/persistent/public/default"
NP = "/admin/v2/non-persistent/public/default"
TOPIC = "persistent://public/default/t"


def status_path(topic: str = "t", sub: str = "s", base: str = P) -> str:
    return f"{base}/{topic}/subscription/{sub}/replicatedSubscriptionStatus"


class ReplicatedStatusCase(WebTestCase):
    """A topic ``t`` with the durable subscription ``s``."""

    @defer.inlineCallbacks
    def setUp(self):
        yield super().setUp()
        yield self.expect("PUT", f"{P}/t", 204)
        yield self.expect("PUT", f"{P}/t/subscription/s", 204)

    def subscription(self, topic=TOPIC, sub="s") -> PersistentSubscription:
        return self.broker.topics[topic].subscriptions[sub]


class SetAndGetTests(ReplicatedStatusCase):
    @defer.inlineCallbacks
    def test_new_subscription_not_replicated(self):
        """GET answers Pulsar's map, the full topic name -> false, for a new subscription."""
        self.assertEqual((yield self.expect("GET", status_path(), 200)), {TOPIC: False})

    @defer.inlineCallbacks
    def test_enable_then_disable(self):
        """POST true -> 204 and the subscription is replicated; POST false -> 204 and it is not."""
        yield self.expect("POST", status_path(), 204, True)
        self.assertTrue(self.subscription().replicated)
        self.assertEqual((yield self.expect("GET", status_path(), 200)), {TOPIC: True})
        stats = yield self.expect("GET", f"{P}/t/stats", 200)
        self.assertIs(stats["subscriptions"]["s"]["isReplicated"], True)
        yield self.expect("POST", status_path(), 204, False)
        self.assertFalse(self.subscription().replicated)
        stats = yield self.expect("GET", f"{P}/t/stats", 200)
        self.assertIs(stats["subscriptions"]["s"]["isReplicated"], False)
        self.assertEqual((yield self.expect("GET", status_path(), 200)), {TOPIC: False})

    @defer.inlineCallbacks
    def test_partition_named_directly(self):
        """A partition's own name works as a topic name (one entry, the partition's)."""
        yield self.expect("PUT", f"{P}/pt/partitions", 204, 2)
        yield self.expect("PUT", f"{P}/pt/subscription/s", 204)
        yield self.expect("POST", status_path("pt-partition-1"), 204, True)
        self.assertEqual((yield self.expect("GET", status_path("pt-partition-1"), 200)),
                         {"persistent://public/default/pt-partition-1": True})
        self.assertEqual((yield self.expect("GET", status_path("pt-partition-0"), 200)),
                         {"persistent://public/default/pt-partition-0": False})

    @defer.inlineCallbacks
    def test_internal_stats_show_the_cursor_property(self):
        """Internal stats print the cursor's properties as Pulsar's do: pulsar.replicated.subscription
        is the long 1 while replicated, absent otherwise."""
        key = "pulsar.replicated.subscription"
        stats = yield self.expect("GET", f"{P}/t/internalStats", 200)
        self.assertNotIn(key, stats["cursors"]["s"]["properties"])
        yield self.expect("POST", status_path(), 204, True)
        stats = yield self.expect("GET", f"{P}/t/internalStats", 200)
        self.assertIs(type(stats["cursors"]["s"]["properties"][key]), int)
        self.assertEqual(stats["cursors"]["s"]["properties"][key], 1)
        yield self.expect("POST", status_path(), 204, False)
        stats = yield self.expect("GET", f"{P}/t/internalStats", 200)
        self.assertNotIn(key, stats["cursors"]["s"]["properties"])

    @defer.inlineCallbacks
    def test_survives_unload(self):
        """The status is durable: the topic unloaded and loaded again still has it."""
        yield self.expect("POST", status_path(), 204, True)
        yield self.expect("PUT", f"{P}/t/unload", 204)
        self.assertEqual((yield self.expect("GET", status_path(), 200)), {TOPIC: True})


class PartitionedTests(ReplicatedStatusCase):
    @defer.inlineCallbacks
    def setUp(self):
        yield super().setUp()
        yield self.expect("PUT", f"{P}/pt/partitions", 204, 3)
        yield self.expect("PUT", f"{P}/pt/subscription/s", 204)

    @defer.inlineCallbacks
    def test_post_applies_to_every_partition(self):
        """POST on the partitioned topic sets every partition; GET has one entry per partition."""
        yield self.expect("POST", status_path("pt"), 204, True)
        expected = {f"persistent://public/default/pt-partition-{i}": True for i in range(3)}
        self.assertEqual((yield self.expect("GET", status_path("pt"), 200)), expected)
        for i in range(3):
            self.assertTrue(self.subscription(f"persistent://public/default/pt-partition-{i}").replicated)

    @defer.inlineCallbacks
    def test_partition_missing_subscription(self):
        """A partition without the subscription: the others are still set, then Pulsar's 404
        "Topic or subscription not found"."""
        yield self.expect("DELETE", f"{P}/pt-partition-1/subscription/s", 204)
        body = yield self.expect("POST", status_path("pt"), 404, True)
        self.assertEqual(body, {"reason": "Topic or subscription not found"})
        self.assertTrue(self.subscription("persistent://public/default/pt-partition-0").replicated)
        self.assertTrue(self.subscription("persistent://public/default/pt-partition-2").replicated)
        body = yield self.expect("GET", status_path("pt"), 404)
        self.assertEqual(body, {"reason": "Topic or subscription not found"})


class RefusedTests(ReplicatedStatusCase):
    @defer.inlineCallbacks
    def test_missing_subscription(self):
        """An unknown subscription: 404 with Pulsar's text, on both verbs."""
        reason = {"reason": f"Subscription nope not found for topic {TOPIC}"}
        self.assertEqual((yield self.expect("POST", status_path(sub="nope"), 404, True)), reason)
        self.assertEqual((yield self.expect("GET", status_path(sub="nope"), 404)), reason)

    @defer.inlineCallbacks
    def test_missing_topic_and_namespace(self):
        """An unknown topic or namespace: 404."""
        yield self.expect("POST", status_path("ghost"), 404, True)
        yield self.expect("GET", status_path("ghost"), 404)
        yield self.expect("GET", status_path(base="/admin/v2/persistent/public/ghost"), 404)

    @defer.inlineCallbacks
    def test_non_persistent_topic(self):
        """Non-persistent topics: 405 with Pulsar's texts (checked before anything else)."""
        body = yield self.expect("POST", status_path(base=NP), 405, True)
        self.assertEqual(body, {"reason": "Cannot enable/disable replicated subscriptions on "
                                          "non-persistent topics"})
        body = yield self.expect("GET", status_path(base=NP), 405)
        self.assertEqual(body, {"reason": "Cannot get replicated subscriptions on non-persistent topics"})

    @defer.inlineCallbacks
    def test_bad_bodies(self):
        """Anything but a JSON boolean is a 400 with a reason (never a 500), nothing changed."""
        for raw in (b"", b"1", b"0", b'"true"', b"null", b"{}", b"[true]", b"tru", b"\xff"):
            body = yield self.expect("POST", status_path(), 400, raw=raw)
            self.assertIn("reason", body)
        self.assertFalse(self.subscription().replicated)

    @defer.inlineCallbacks
    def test_feature_disabled_on_the_broker(self):
        """enableReplicatedSubscriptions=false: enabling answers Pulsar's 500 "Failed to update
        cursor properties" (nothing stored), disabling still works."""
        self.harness.config.enableReplicatedSubscriptions = False
        body = yield self.expect("POST", status_path(), 500, True)
        self.assertTrue(body["reason"].startswith("Failed to update cursor properties"))
        self.assertFalse(self.subscription().replicated)
        yield self.expect("POST", status_path(), 204, False)

    @defer.inlineCallbacks
    def test_not_owned_redirects(self):
        """A topic this broker does not own: 307 to the owner, as the other topic routes."""
        self.broker.topics.pop(TOPIC).close()
        owner = {"nativeUrl": "pulsar://b:6650", "httpUrl": "http://b:8080"}

        def not_here(*args, **kwargs):
            return defer.fail(NotOwnedError("served by b", owner))
        self.patch(self.broker, "get_topic", not_here)
        for method, body in (("POST", b"true"), ("GET", None)):
            response = yield treq.request(method, self.base + status_path(), data=body,
                                          allow_redirects=False, pool=self.pool)
            yield response.content()
            self.assertEqual(response.code, 307)
            self.assertEqual(response.headers.getRawHeaders(b"location"),
                             [b"http://b:8080" + status_path().encode()])


class AuthorizationRuleTests(ReplicatedStatusCase):
    def test_consume_permission(self):
        """Pulsar's provider checks SET/GET_REPLICATED_SUBSCRIPTION_STATUS with canConsume."""
        template = "/admin/v2/persistent/{tenant}/{namespace}/{topic}/subscription/{sub}" \
                   "/replicatedSubscriptionStatus"
        self.assertEqual(policy_table.http_rule("POST", template), policy_table.TOPIC_CONSUME)
        self.assertEqual(policy_table.http_rule("GET", template), policy_table.TOPIC_CONSUME)

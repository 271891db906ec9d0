"""
What an idle loaded topic holds (issue 14: RSS per loaded idle topic): a producers-only topic
keeps no empty containers of its own (subscriptions, cursors, cached entries, queued or pending
adds, read handles), and those appear as soon as they are used, so the topic still dispatches.
"""

from types import MappingProxyType

from twisted.internet import defer
from twisted.trial.unittest import SynchronousTestCase

from pulsar_twisted.broker.rates import RateMeter
from pulsar_twisted.mledger.cache import NO_ENTRY_CACHE
from pulsar_twisted.proto import PulsarApi_pb2 as api

from tests.broker.messaging import FeatureCase, message, payloads

T = api.BaseCommand


class IdleTopicTests(FeatureCase):
    @defer.inlineCallbacks
    def loaded_with_one_message(self):
        client = self.harness.client()
        self.create_producer(client)
        yield self.harness.pump()
        self.assertEqual(len(self.send(client, 0)), 1)  # the receipt
        return client, self.topic_object()

    @defer.inlineCallbacks
    def test_idle_producer_topic_holds_shared_empties(self):
        """After one publish a producers-only topic holds shared empty mappings and tuples."""
        _client, topic = yield self.loaded_with_one_message()
        ledger = topic.ledger
        self.assertIsInstance(topic.subscriptions, MappingProxyType)
        self.assertEqual(topic._throttled, ())
        self.assertEqual(topic.access.waiting, ())
        self.assertFalse(hasattr(topic.access, "__dict__"))
        # No instance dictionaries (issue 14): slots only, for the objects a loaded topic keeps.
        [producer] = topic.producers.values()
        for kept in (topic, topic.counters, ledger, ledger.counters, producer, topic.topic_name):
            self.assertFalse(hasattr(kept, "__dict__"), type(kept).__name__)
        # Read from the topic, not kept per producer / per access (a smaller allocation block).
        self.assertIs(topic.access.ledger, ledger)
        self.assertFalse(producer.refuse_chunks)
        self.assertIsInstance(ledger.cursors, MappingProxyType)
        self.assertEqual(ledger._pending, ())
        self.assertEqual(ledger._queued, ())
        self.assertEqual(len(ledger._cache), 0)
        self.assertIs(ledger._cache, NO_ENTRY_CACHE)
        self.assertIsInstance(ledger._cache._ledgers, MappingProxyType)
        self.assertEqual(ledger.path, "/managed-ledgers/public%2Fdefault%2Fpersistent%2Ffeatures")
        [producer] = topic.producers.values()
        self.assertIsInstance(producer.metadata, MappingProxyType)
        self.assertIs(producer.rates.rates, RateMeter(2).rates)
        self.assertEqual(producer.stats()["metadata"], {})

    @defer.inlineCallbacks
    def test_containers_appear_on_first_use(self):
        """A subscription made after the idle phase gets its cursor and is dispatched to."""
        client, topic = yield self.loaded_with_one_message()
        self.subscribe(client, 1)
        yield self.harness.pump()
        self.assertEqual(list(topic.subscriptions), ["s"])
        self.assertEqual(list(topic.ledger.cursors), ["s"])
        self.assertEqual(payloads(client.received()), ["m0"])
        client.send(T(type=T.SEND, send=api.CommandSend(producer_id=1, sequence_id=1, num_messages=1)),
                    message(1))
        self.assertEqual(payloads(client.received()), ["m1"])
        # An entry with a reader went through the cache (evicted once read).
        self.assertNotIsInstance(topic.ledger._cache._ledgers, MappingProxyType)
        stats = topic.stats()
        self.assertEqual(list(stats["subscriptions"]), ["s"])

    @defer.inlineCallbacks
    def test_unsubscribe_and_delete_cursor_after_lazy_creation(self):
        """Removing the only subscription and its cursor works on the dicts made on first use."""
        client, topic = yield self.loaded_with_one_message()
        self.subscribe(client, 1, permits=0)
        yield self.harness.pump()
        client.received()
        client.send(T(type=T.UNSUBSCRIBE, unsubscribe=api.CommandUnsubscribe(consumer_id=1, request_id=7)))
        yield self.harness.pump()
        self.assertEqual(len(client.commands(T.SUCCESS)), 1)
        self.assertEqual(dict(topic.subscriptions), {})
        self.assertEqual(dict(topic.ledger.cursors), {})


class RateMeterSharingTests(SynchronousTestCase):
    def test_idle_period_rates_are_the_shared_zeros(self):
        """A period without growth gives the shared zero rates; growth gives the true rates."""
        zeros = RateMeter(2).rates
        meter = RateMeter(2)
        meter.sample(None, 0, 0)
        meter.sample(10.0, 0, 0)
        self.assertIs(meter.rates, zeros)
        meter.sample(10.0, 5, 100)
        self.assertEqual(meter.rates, (0.5, 10.0))
        meter.sample(10.0, 5, 100)
        self.assertIs(meter.rates, zeros)
        self.assertEqual(meter.rate_and_size(), (0.0, 0.0, 0.0))
        meter.sample(5.0, 6, 150)
        self.assertEqual(meter.rates, (0.2, 10.0))

    def test_unchanged_totals_keep_the_tuple_held(self):
        """Totals equal to the last sample's do not replace the tuple held (the shared zeros too)."""
        meter = RateMeter(3)
        first = meter._last
        meter.sample(10.0, 0, 0, 0)
        self.assertIs(meter._last, first)
        held = (1, 2, 3)
        meter.sample(10.0, *held)
        kept = meter._last
        meter.sample(10.0, 1, 2, 3)
        self.assertIs(meter._last, kept)
        self.assertEqual(meter.rates, (0.0, 0.0, 0.0))

"""
Liveness after a heal (issue 11 item 6): a topic unloaded with publishes in flight tells its
producers to reconnect promptly, whatever becomes of those publishes.

The process trace: a frozen owner resumes, its ZooKeeper session is gone, so it unloads the
bundle's topics (closing their managed ledgers) while adds are in flight; the new owner has
fenced the ledgers, so the bookies refuse those adds. The managed ledger, already closing, did not
fail them, its close waited for them forever and so did each producer's close: no CLOSE_PRODUCER,
and the client's sends went unanswered until its own send timeout (~53 s in the process test).
"""

from pulsar_twisted.broker.producer import Producer
from pulsar_twisted.mledger.ledger import State

from tests.broker.messaging import T, FeatureCase


def kinds(commands):
    return [c.type for c in commands]


class UnloadWithPublishesInFlightTests(FeatureCase):
    config = {"brokerDeduplicationEnabled": True}

    def producer_with_adds_in_flight(self):
        """A client whose producer "p" stored m0 and has m1, m2 in flight (adds held)."""
        c = self.harness.client()
        self.create_producer(c, name="p")
        [receipt] = self.send(c, 0)
        self.assertEqual(receipt.type, T.SEND_RECEIPT)
        self.harness.ledger_client.pause_adds()
        self.assertEqual(self.send(c, 1), [])
        self.assertEqual(self.send(c, 2), [])
        return c

    def test_bundle_loss_then_fenced_adds_close_the_producer(self):
        """The process trace on fakes: bundle lost (unload), then a new owner fences the ledger
        and the adds in flight are refused. CLOSE_PRODUCER goes out at once (no SEND_ERROR, no
        receipt) and the managed ledger finishes closing."""
        c = self.producer_with_adds_in_flight()
        topic = self.topic_object()
        ml = topic.ledger
        broker = self.harness.broker
        broker.unload_topics(lambda name: True)
        self.assertEqual(c.commands(), [], "closed before the publishes in flight were done")
        # The new owner's recovery fences the ledger: the held adds now fail on the bookies.
        self.successResultOf(self.harness.ledger_client.open_ledger(ml.current_ledger_id(),
                                                                    recovery=True))
        self.harness.ledger_client.resume_adds()
        self.clock.advance(0)
        self.assertEqual(kinds(c.commands()), [T.CLOSE_PRODUCER])
        self.assertEqual(ml.state, State.CLOSED)
        self.assertNotIn(self.topic, broker.topics)
        self.assertEqual(topic.producers, {})

    def test_close_waits_for_publishes_in_flight_within_a_bound(self):
        """Publishes in flight that never complete (a bookie frozen): CLOSE_PRODUCER is sent
        once the grace period is over; an answer arriving later is not sent (the client
        resends after reconnecting and deduplication answers what was stored)."""
        c = self.producer_with_adds_in_flight()
        d = self.harness.broker.unload_topic(self.topic)
        grace = Producer.close_grace_seconds
        self.clock.advance(grace - 0.1)
        self.assertEqual(c.commands(), [])
        self.clock.advance(0.1)
        self.assertEqual(kinds(c.commands()), [T.CLOSE_PRODUCER])
        self.harness.ledger_client.resume_adds()
        self.clock.advance(0)
        self.assertEqual(c.commands(), [], "answered after CLOSE_PRODUCER")
        self.successResultOf(d)

    def test_close_answers_publishes_done_within_the_grace(self):
        """Publishes done within the grace period are answered first, then CLOSE_PRODUCER, and
        nothing more is sent when the grace period would have ended."""
        c = self.producer_with_adds_in_flight()
        d = self.harness.broker.unload_topic(self.topic)
        self.clock.advance(1)
        self.harness.ledger_client.resume_adds()
        self.clock.advance(0)
        answers = c.commands()
        self.assertEqual(kinds(answers), [T.SEND_RECEIPT, T.SEND_RECEIPT, T.CLOSE_PRODUCER])
        self.assertEqual([a.send_receipt.sequence_id for a in answers[:2]], [1, 2])
        self.successResultOf(d)
        self.clock.advance(Producer.close_grace_seconds)
        self.assertEqual(c.commands(), [])

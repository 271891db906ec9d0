"""Seek by publish time: binary search over ledgers then entries."""

from twisted.internet import defer

from pulsar_twisted.broker.seek_time import find_position_by_time
from pulsar_twisted.common.position import Position
from pulsar_twisted.proto import PulsarApi_pb2 as api
from pulsar_twisted.testing.patching import patch_method

from tests.broker.messaging import T, FeatureCase, payloads


class SeekByTimeTests(FeatureCase):
    config = {"managedLedgerMaxEntriesPerLedger": 7, "managedLedgerMinLedgerRolloverTimeMinutes": 0}

    def setUp(self):
        d = super().setUp()

        def published(_):
            self.consumer = self.harness.client()
            self.subscribe(self.consumer, 1, permits=0)
            p = self.harness.client()
            self.create_producer(p)
            self.positions = []
            for seq in range(40):
                [r] = self.send(p, seq)
                self.positions.append(Position(r.send_receipt.message_id.ledgerId,
                                               r.send_receipt.message_id.entryId))
        return d.addCallback(published)

    def linear(self, when):
        for seq, position in enumerate(self.positions):
            if 1000 + seq >= when:
                return position
        return None

    @defer.inlineCallbacks
    def test_matches_linear_scan_everywhere(self):
        ledger = self.topic_object().ledger
        self.assertGreater(len(ledger.ledgers_info()), 4)
        for when in range(990, 1045):
            found = yield find_position_by_time(ledger, when)
            expected = self.linear(when)
            if expected is None:
                last = ledger.last_confirmed_entry()
                self.assertEqual(found, Position(last.ledger_id, last.entry_id + 1), when)
            else:
                self.assertEqual(found, expected, when)

    @defer.inlineCallbacks
    def test_reads_logarithmic_entries(self):
        ledger = self.topic_object().ledger
        reads = []
        original = ledger.read_entries

        def counting(start, count):
            reads.append(start)
            return original(start, count)

        patch_method(self, ledger, "read_entries", counting)
        yield find_position_by_time(ledger, 1023)
        self.assertLessEqual(len(reads), 8)

    def test_seek_command_by_time(self):
        self.consumer.send(T(type=T.SEEK, seek=api.CommandSeek(consumer_id=1, request_id=5,
                                                               message_publish_time=1037)))
        replies = self.consumer.commands()
        self.assertIn(T.SUCCESS, [r.type for r in replies])
        consumer = self.harness.client()
        self.subscribe(consumer, 2, permits=10)
        self.assertEqual(payloads(consumer.received()), ["m37", "m38", "m39"])

    @defer.inlineCallbacks
    def test_empty_topic(self):
        c = self.harness.client()
        self.create_producer(c, topic=self.topic + "-empty")
        ledger = self.topic_object(self.topic + "-empty").ledger
        found = yield find_position_by_time(ledger, 5)
        last = ledger.last_confirmed_entry()
        self.assertEqual(found, Position(last.ledger_id, last.entry_id + 1))


"""
The SENDs of one read are handed over together (``broker.sends``, ``Producer.publish_messages``,
``PersistentTopic.publish_all``): random scripts of reads (two producers, duplicates, resends,
batches, chunks, bad checksums, SENDs without a message) and faults (adds failing, or failing
fenced, completions held, the managed ledger terminated) give the client exactly the answers,
in the same order, and store exactly the messages that one SEND per read gives.
"""

import random

from twisted.internet import defer
from twisted.trial import unittest

from pulsar_twisted.common.bk_errors import BKException, LedgerFencedError
from pulsar_twisted.proto import PulsarApi_pb2 as api
from pulsar_twisted.testing.broker import BrokerHarness
from pulsar_twisted.wire import frames

from tests.broker.messaging import T, Sub, message

TOPIC = "persistent://public/default/equivalence"
NEG1 = 0xFFFFFFFFFFFFFFFF


def send_frame(pid, seq, kind="ok", highest=None, chunk=None):
    send = api.CommandSend(producer_id=pid, sequence_id=seq)
    if highest is not None:
        send.highest_sequence_id = highest
        send.num_messages = highest - seq + 1
    fields = {}
    if chunk is not None:
        send.is_chunk = True
        fields = dict(uuid=f"u{seq}", chunk_id=chunk[0], num_chunks_from_msg=chunk[1],
                      total_chunk_msg_size=10)
    command = T(type=T.SEND, send=send)
    if kind == "empty":
        return frames.encode_command(command)
    name = "pq"[pid - 1]
    part = bytearray(message(seq, f"{name}-{seq}-{chunk}".encode(), producer=name, **fields))
    if kind == "bad":
        part[-1] ^= 0xFF
    return frames.encode_payload_command(command, bytes(part))


def answers(commands):
    out = []
    for c in commands:
        if c.type == T.SEND_RECEIPT:
            r = c.send_receipt
            out.append(("receipt", r.producer_id, r.sequence_id, r.highest_sequence_id,
                        -1 if r.message_id.entryId == NEG1 else r.message_id.entryId))
        elif c.type == T.SEND_ERROR:
            out.append(("error", c.send_error.producer_id, c.send_error.sequence_id, c.send_error.error))
        elif c.type == T.CLOSE_PRODUCER:
            out.append(("close", c.close_producer.producer_id))
        elif c.type == T.PRODUCER_SUCCESS:
            out.append(("producer", c.producer_success.last_sequence_id))
        else:
            out.append((T.Type.Name(c.type),))
    return out


def script_of(seed, resends):
    """Steps: ("read", [send_frame args]) or a fault. ``resends``: SENDs of ids already sent."""
    r = random.Random(seed)
    script, next_seq = [], {1: 0, 2: 0}
    for _ in range(r.randrange(2, 9)):
        x = r.random()
        if x < 0.12:
            script.append(("fail", r.randrange(1, 3), r.choice([BKException, LedgerFencedError])))
        elif x < 0.25:
            script.append(("pause",))
        elif x < 0.35:
            script.append(("resume",))
        elif x < 0.37:
            script.append(("terminate",))
        items = []
        for _ in range(r.randrange(1, 7)):
            pid = 1 if r.random() < 0.7 else 2
            seq = next_seq[pid]
            y = r.random()
            if y < 0.08:
                items.append((pid, seq, "bad"))
                next_seq[pid] += 1
            elif y < 0.16 and seq and resends:
                items.append((pid, r.randrange(0, seq)))
            elif y < 0.2:
                items.append((pid, seq, "empty"))
                next_seq[pid] += 1
            elif y < 0.27:
                items.append((pid, seq, "ok", seq + 2))
                next_seq[pid] += 3
            elif y < 0.35:
                n = r.randrange(2, 4)
                items.extend((pid, seq, "ok", None, (k, n)) for k in range(n))
                next_seq[pid] += 1
            elif y < 0.38 and seq and resends:
                items.append((pid, seq - 1, "ok", None, (0, 2)))
            else:
                items.append((pid, seq))
                next_seq[pid] += 1
        script.append(("read", items))
    return script, r.random() < 0.6


class SendBatchingEquivalenceTests(unittest.TestCase):

    @defer.inlineCallbacks
    def play(self, script, dedup, one_read, add_delay):
        """The answers the client got, step by step, and the payloads stored."""
        harness = BrokerHarness(brokerDeduplicationEnabled=dedup)
        yield harness.start()
        c = harness.client()
        request_ids = iter(range(100, 10000))

        def create(pid):
            c.send(T(type=T.PRODUCER, producer=api.CommandProducer(
                topic=TOPIC, producer_id=pid, request_id=next(request_ids),
                producer_name="pq"[pid - 1], user_provided_producer_name=True)))
        create(1)
        create(2)
        log = [answers(c.commands())]
        bk = harness.ledger_client
        bk.add_delay = add_delay

        def settle():
            harness.clock.advance(0.01)
            got = answers(c.commands())
            log.append(got)
            closed = [a[1] for a in got if a[0] == "close"]
            if closed:
                harness.clock.advance(1)     # the topic unfences, or a new one loads
                harness.clock.advance(10)
                for pid in closed:
                    create(pid)
                log.append(answers(c.commands()))
        for step in script:
            if step[0] == "read":
                if one_read:
                    c.send_raw(b"".join(send_frame(*item) for item in step[1]))
                else:
                    for item in step[1]:
                        c.send_raw(send_frame(*item))
                log.append(answers(c.commands()))
                settle()
            elif step[0] == "fail":
                bk.fail_next_adds(step[1], step[2])
            elif step[0] == "pause":
                bk.pause_adds()
            elif step[0] == "resume":
                bk.resume_adds()
                settle()
            elif step[0] == "terminate":
                topic = harness.broker.topics.get(TOPIC)
                if topic is not None:
                    topic.ledger.terminate().addErrback(lambda _: None)
        bk.resume_adds()
        harness.clock.advance(30)
        log.append(answers(c.commands()))
        consumer = harness.client()
        consumer.send(T(type=T.SUBSCRIBE, subscribe=api.CommandSubscribe(
            topic=TOPIC, subscription="check", subType=Sub.Exclusive, consumer_id=9,
            request_id=9999, consumer_name="check", initialPosition=Sub.Earliest)))
        consumer.send(T(type=T.FLOW, flow=api.CommandFlow(consumer_id=9, messagePermits=10000)))
        stored = [frames.split_message(m)[1] for cmd, m in consumer.received() if cmd.type == T.MESSAGE]
        return log, stored

    @defer.inlineCallbacks
    def compare(self, seeds, add_delay, resends):
        differing = []
        for seed in seeds:
            script, dedup = script_of(seed, resends)
            alone = yield self.play(script, dedup, False, add_delay)
            together = yield self.play(script, dedup, True, add_delay)
            if alone != together:
                differing.append((seed, script, alone, together))
        self.assertEqual([d[:2] for d in differing], [])

    def test_storage_answering_later(self):
        """Adds complete after the read (as the bookies' do): resends of SENDs in flight too."""
        return self.compare(range(150), 0.001, resends=True)

    def test_storage_answering_at_once(self):
        """Adds complete while they are made (writes failing at once in the middle of a read).
        No resend of an id sent in the same read: one at a time it is stored by then (a
        duplicate), in one read it is in flight (not known yet), which no real storage does."""
        return self.compare(range(150), 0, resends=False)

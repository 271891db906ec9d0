"""
Interop: batch index acknowledgements survive a broker restart (issue 5, point 1).

With ``acknowledgmentAtBatchIndexLevelEnabled`` the broker keeps the unacked indexes of a partly
acknowledged batch in the subscription's cursor, persisted with the mark-delete position: after a
graceful restart the official client (``batch_index_ack_enabled=True``) gets the batch again with
its ``ack_set`` and hands out only the messages not acknowledged before.
"""

import time

from tests.interop.test_core import CT, InteropCase
from tests.interop.test_restart import RETAIN


class BatchIndexAckRestartTests(InteropCase):
    standalone_config = dict(RETAIN, acknowledgmentAtBatchIndexLevelEnabled="true")

    def publish_batch(self, producer, prefix, count):
        payloads = [f"{prefix}-{i}".encode() for i in range(count)]
        for payload in payloads:
            producer.send_async(payload, None)
        producer.flush()
        return payloads

    def test_only_unacked_indexes_come_back_after_restart(self):
        name = self.topic()
        consumer = self.client.subscribe(name, "sub", consumer_type=CT.Shared,
                                         batch_index_ack_enabled=True)
        exclusive = self.client.subscribe(name, "cumulative", consumer_type=CT.Exclusive,
                                          batch_index_ack_enabled=True)
        producer = self.client.create_producer(name, batching_enabled=True, batching_max_messages=5,
                                               batching_max_publish_delay_ms=50)
        first = self.publish_batch(producer, "a", 5)
        second = self.publish_batch(producer, "b", 5)
        got = self.receive_all(consumer, 10)
        self.assertEqual(len({self.mid(m.message_id()) for m in got}), 2, "two batches")
        for i in (0, 2, 3, 6):
            consumer.acknowledge(got[i])
        got_exclusive = self.receive_all(exclusive, 10)
        exclusive.acknowledge_cumulative(got_exclusive[7])
        time.sleep(0.5)     # the client groups acks (100 ms); closing flushes them too
        consumer.close()
        exclusive.close()
        self.client.close()
        self.standalone.restart()
        client = self.new_client()
        again = client.subscribe(name, "sub", consumer_type=CT.Shared, batch_index_ack_enabled=True)
        redelivered = self.drain(again, quiet_ms=1500)
        everything = first + second
        self.assertEqual(sorted(self.datas(redelivered)),
                         sorted(everything[i] for i in (1, 4, 5, 7, 8, 9)))
        again_exclusive = client.subscribe(name, "cumulative", consumer_type=CT.Exclusive,
                                           batch_index_ack_enabled=True)
        self.assertEqual(self.datas(self.drain(again_exclusive, quiet_ms=1500)), second[3:])

"""
Interop (issue 13 item 4): the official client on ``<topic>-partition-<i>`` with ``i`` past the
partitioned topic's count. Producers and consumers fail with NotAllowedError (Pulsar: "Illegal
topic partition name ..."), the HTTP lookup answers 404, and the admin API lists no such topic.
"""

import json
import urllib.error
import urllib.request

from tests.interop.admin_support import AdminInteropCase
from tests.interop.test_core import pulsar


class PartitionBoundsInteropTests(AdminInteropCase):
    def partitioned(self, partitions=2):
        local = self.topic()
        topic = f"persistent://public/default/{local}"
        self.rest("PUT", f"/admin/v2/persistent/public/default/{local}/partitions", partitions)
        return topic, local

    def get_json(self, path):
        with urllib.request.urlopen(self.standalone.web_service_url + path, timeout=10) as response:
            return json.loads(response.read())

    def test_producer_and_consumer_refused(self):
        topic, local = self.partitioned(2)
        with self.assertRaises(pulsar.NotAllowedError):
            self.client.create_producer(f"{topic}-partition-2")
        with self.assertRaises(pulsar.NotAllowedError):
            self.client.subscribe(f"{topic}-partition-3", "s")
        # In range: works, and the partitioned topic itself still does.
        producer = self.client.create_producer(f"{topic}-partition-1")
        producer.send(b"x")
        self.client.create_producer(topic).send(b"y")
        self.assertIn("past the 2 partitions of its partitioned topic", self.standalone.log_text())

        listed = self.get_json("/admin/v2/persistent/public/default")
        self.assertFalse([t for t in listed if t.endswith(("-partition-2", "-partition-3"))], listed)
        self.assertIn(f"persistent://public/default/{local}-partition-1", listed)
        with self.assertRaises(urllib.error.HTTPError) as caught:
            self.get_json(f"/lookup/v2/topic/persistent/public/default/{local}-partition-2")
        self.assertEqual(caught.exception.code, 404)
        found = self.get_json(f"/lookup/v2/topic/persistent/public/default/{local}-partition-0")
        self.assertEqual(found["brokerUrl"], self.standalone.service_url)

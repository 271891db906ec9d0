"""
A small broker scenario for the /metrics page (``tests/web/test_metrics_page.py``): two namespaces'
worth of topics (persistent with producers, subscriptions, acks and redeliveries; a non-persistent
one), two scrapes 10 s apart on a ``task.Clock`` so that every rate is non-zero. The golden files
in ``tests/web/data/`` are this scenario scraped by the prometheus_client collector the page had
before it was generated in slices (commit ed57f3c), so the new page is checked against the old.
"""

from pulsar_twisted.proto import PulsarApi_pb2 as api
from tests.broker.messaging import NON_PERSISTENT, Sub, T, messages

OTHER = "persistent://public/default/other"


def play(case, scrape):
    """Drive ``case`` (a FeatureCase) through the scenario; ``scrape()`` is called twice and the
    second result returned."""
    producer = case.harness.client()
    case.create_producer(producer)
    other = case.harness.client()
    case.create_producer(other, topic=OTHER)
    np = case.harness.client()
    case.create_producer(np, topic=NON_PERSISTENT)
    consumer = case.harness.client()
    case.subscribe(consumer, 1, kind=Sub.Shared, permits=0, name="alice")
    case.subscribe(consumer, 2, kind=Sub.Exclusive, sub="t", permits=0, topic=OTHER, name="bob")
    case.subscribe(consumer, 3, kind=Sub.Exclusive, sub="n", permits=5, topic=NON_PERSISTENT)
    scrape()
    case.clock.advance(10)
    for seq in range(6):
        case.send(producer, seq, payload=b"x" * (100 + 300 * seq))
    case.send(other, 0)
    case.send(np, 0)
    consumer.send(T(type=T.FLOW, flow=api.CommandFlow(consumer_id=1, messagePermits=4)))
    got = [c.message.message_id for c, _ in messages(consumer.received())
           if c.message.consumer_id == 1]
    case.redeliver(consumer, 1, got[2:])
    case.ack(consumer, 1, got[:2])
    return scrape()

"""
One Pulsar IO instance (a source or a sink), in the instance process ``instance_main`` starts
when the spec's ``componentType`` is ``SOURCE`` or ``SINK``; the same status pipe and the same
supervision as a function's instance.

- A source: each ``Record`` the connector reads is sent to ``topicName`` (or the record's own
  ``topic`` when the spec names none: the change-data source's per-table topics) with its key,
  properties and event time; the connector's ``ack`` runs from the send's callback, once the
  broker has persisted the message (ATLEAST_ONCE; ATMOST_ONCE acks it on sending).
- A sink: consumes ``inputs`` on a Shared subscription (Failover with ``retainOrdering``)
  named ``sourceSubscriptionName`` or ``tenant/ns/name``, hands the connector what is ready (up
  to the connector's ``batch_size`` messages, waiting ``batch_time_ms`` at most to fill it) and
  acks each message only after ``write`` has returned; the records ``write`` gives back as bad
  are negative-acked (so ``maxMessageRetries``/``deadLetterTopic`` apply), and a write that
  raises negative-acks the whole batch. ATMOST_ONCE acks on receipt. A connector that cannot
  start (bad config, database down) ends the process with the error logged; the supervisor
  restarts it with its back-off.
"""

import json
import logging
import threading
import time

from pulsar_twisted.functions.connectors import SinkRecord, sink_class, source_class

SINK_BATCH = 500
NACK_DELAY_MS = 1000


class _Reporter:
    def __init__(self, status_out):
        self.status_out = status_out
        self.lock = threading.Lock()
        self.counts = {"numReceived": 0, "numSuccessfullyProcessed": 0, "numUserExceptions": 0,
                       "numSystemExceptions": 0, "averageLatency": 0.0, "lastInvocationTime": 0}
        self.last_report = 0.0
        #: Pulsar's ``ExceptionInformation`` of the latest refusals (the status shows them as
        #: latestSinkExceptions/latestSourceExceptions).
        self.latest = []

    def exception(self, text: str) -> None:
        with self.lock:
            self.latest = (self.latest + [{"exceptionString": text,
                                           "msSinceEpoch": int(time.time() * 1000)}])[-10:]

    def report(self, event: str, **fields) -> None:
        fields["event"] = event
        with self.lock:
            self.status_out.write(json.dumps(fields) + "\n")
            self.status_out.flush()

    def stats(self, force=False) -> None:
        now = time.time()
        if force or now - self.last_report >= 0.5:
            self.last_report = now
            self.report("stats", latestUserExceptions=list(self.latest), userMetrics={}, **self.counts)


class _Instance:
    def report(self, event: str, **fields) -> None:
        """What ``instance_main`` calls with a fatal error."""
        self.reporter.report(event, **fields)


class SourceInstance(_Instance):
    def __init__(self, spec: dict, instance_id: int, status_out):
        self.config = spec["sourceConfig"]
        self.spec = spec
        self.instance_id = instance_id
        self.reporter = _Reporter(status_out)
        self.running = True

    def run(self) -> None:
        import pulsar
        c = self.config
        kind = c["archive"][len("builtin://"):]
        self.source = source_class(kind)(c.get("configs") or {})
        self.client = pulsar.Client(self.spec["serviceUrl"], operation_timeout_seconds=30)
        producers = {}
        self.reporter.report("running")
        at_most_once = c.get("processingGuarantees") == "ATMOST_ONCE"
        while self.running:
            record = self.source.read(0.5)
            if record is None:
                self.reporter.stats()
                continue
            self.reporter.counts["numReceived"] += 1
            self.reporter.counts["lastInvocationTime"] = int(time.time() * 1000)
            conf = {"properties": dict(record.properties)}
            if record.key is not None:
                conf["partition_key"] = record.key
            if record.event_time:
                conf["event_timestamp"] = int(record.event_time)
            if at_most_once:
                self.source.ack(record)
            topic = c.get("topicName") or record.topic
            producer = producers.get(topic)
            if producer is None:
                producer = producers[topic] = self.client.create_producer(
                    topic, block_if_queue_full=True, batching_enabled=True,
                    batching_max_publish_delay_ms=5)
            producer.send_async(record.value, self._sent(record, at_most_once), **conf)
            self.reporter.stats()
        for producer in producers.values():
            producer.flush()
        self.source.close()
        self.reporter.stats(force=True)
        self.client.close()

    def _sent(self, record, already_acked):
        def callback(result, msg_id):
            import pulsar
            if result == pulsar.Result.Ok:
                if not already_acked:
                    self.source.ack(record)
                self.reporter.counts["numSuccessfullyProcessed"] += 1
            else:
                # Not persisted: the record stays unacked, so the source reads it again after a
                # restart; the supervisor restarts us.
                self.reporter.counts["numSystemExceptions"] += 1
                logging.getLogger(__name__).error("send failed: %s", result)
                self.running = False
        return callback


class SinkInstance(_Instance):
    def __init__(self, spec: dict, instance_id: int, status_out):
        self.config = spec["sinkConfig"]
        self.spec = spec
        self.instance_id = instance_id
        self.reporter = _Reporter(status_out)
        self.running = True

    def _subscribe(self, pulsar):
        c = self.config
        inputs = list(c.get("inputs") or [])
        for mapping in ("topicToSerdeClassName", "topicToSchemaType", "inputSpecs"):
            inputs += [t for t in (c.get(mapping) or {}) if t not in inputs]
        consumer_type = (pulsar.ConsumerType.Failover if c.get("retainOrdering")
                         else pulsar.ConsumerType.Shared)
        position = (pulsar.InitialPosition.Earliest if c.get("sourceSubscriptionPosition") == "Earliest"
                    else pulsar.InitialPosition.Latest)
        dlq = None
        if c.get("maxMessageRetries") is not None and c["maxMessageRetries"] >= 0:
            dlq = pulsar.ConsumerDeadLetterPolicy(c["maxMessageRetries"], c.get("deadLetterTopic"))
        return self.client.subscribe(
            inputs if len(inputs) > 1 else inputs[0],
            c.get("sourceSubscriptionName") or f"{c['tenant']}/{c['namespace']}/{c['name']}",
            consumer_type=consumer_type, initial_position=position, dead_letter_policy=dlq,
            negative_ack_redelivery_delay_ms=c.get("negativeAckRedeliveryDelayMs") or NACK_DELAY_MS,
            consumer_name=f"{c['name']}-{self.instance_id}")

    def run(self) -> None:
        import pulsar
        c = self.config
        kind = c["archive"][len("builtin://"):]
        self.sink = sink_class(kind)(c.get("configs") or {})
        self.values = None
        if getattr(self.sink, "wants_json", False):
            from pulsar_twisted.functions.connectors.schemas import SchemaValues
            self.values = SchemaValues(self.spec.get("webServiceUrl"))
        self.client = pulsar.Client(self.spec["serviceUrl"], operation_timeout_seconds=30)
        self.consumer = self._subscribe(pulsar)
        self.reporter.report("running")
        while self.running:
            batch = self._receive_batch(pulsar)
            if batch:
                self._write(batch, c.get("processingGuarantees") == "ATMOST_ONCE")
            self.reporter.stats()
        self.sink.close()
        self.reporter.stats(force=True)
        self.client.close()

    def _receive_batch(self, pulsar) -> list:
        """What is ready: one message waited for (half a second at most), then what follows
        within the connector's ``batch_time_ms`` (default a few ms), up to its ``batch_size``."""
        batch = []
        size = getattr(self.sink, "batch_size", SINK_BATCH)
        linger = getattr(self.sink, "batch_time_ms", 5) / 1000.0
        timeout, deadline = 500, None
        while len(batch) < size:
            try:
                batch.append(self.consumer.receive(timeout_millis=timeout))
            except pulsar.Timeout:
                break
            if deadline is None:
                deadline = time.monotonic() + linger
            # Whatever is already here is taken at once; then wait out the linger.
            timeout = max(1, int((deadline - time.monotonic()) * 1000))
            if time.monotonic() >= deadline:
                timeout = 1
        return batch

    def _records(self, batch) -> tuple:
        """(the SinkRecords to write, those refused already: an AVRO value that does not
        decode). A schema that cannot be fetched raises (the batch is negative-acked)."""
        records, bad = [], []
        for message in batch:
            record = SinkRecord.of(message)
            if self.values is not None:
                try:
                    record.value = self.values.json_value(message, record.value)
                except ValueError as e:
                    record.error = str(e)
                    bad.append(record)
                    continue
            records.append(record)
        return records, bad

    def _write(self, batch, at_most_once: bool) -> None:
        counts = self.reporter.counts
        counts["numReceived"] += len(batch)
        counts["lastInvocationTime"] = int(time.time() * 1000)
        if at_most_once:
            for message in batch:
                self.consumer.acknowledge(message)
        started = time.time()
        try:
            records, bad = self._records(batch)
            bad += self.sink.write(records) or []
        except Exception as e:
            counts["numSystemExceptions"] += len(batch)
            logging.getLogger(__name__).exception("sink write of %d records failed: %s", len(batch), e)
            if not at_most_once:
                for message in batch:
                    self.consumer.negative_acknowledge(message)
            return
        refused = {id(r.message) for r in bad}
        for record in bad:
            counts["numUserExceptions"] += 1
            self.reporter.exception(record.error or "refused")
            logging.getLogger(__name__).error("record %s from %s refused: %s", record.message.message_id(),
                                              record.topic, record.error)
            if not at_most_once:
                self.consumer.negative_acknowledge(record.message)
        if not at_most_once:
            for message in batch:
                if id(message) not in refused:
                    self.consumer.acknowledge(message)
        counts["numSuccessfullyProcessed"] += len(batch) - len(refused)
        counts["averageLatency"] = (time.time() - started) * 1000.0 / len(batch)


INSTANCES = {"SOURCE": SourceInstance, "SINK": SinkInstance}

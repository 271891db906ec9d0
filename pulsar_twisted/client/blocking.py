"""
A blocking facade over the Deferred-based client, for plain scripts that know nothing of Twisted.

The reactor runs in one background daemon thread started on first use (if a reactor is already
running in this process, in another thread, it is used instead). Every call hops into the reactor
thread (``reactor.callFromThread``), waits for the Deferred with a timeout, and returns a plain
value or raises the Pulsar exception (``pulsar_twisted.client.errors``). Message listeners and
``send_async`` callbacks run on one listener thread per client, so they may call blocking methods.
Method names follow the official Python client where it makes sense::

    from pulsar_twisted.client.blocking import Client
    with Client("pulsar://localhost:6650") as client:
        producer = client.create_producer("my-topic")
        producer.send(b"hello")
        consumer = client.subscribe("my-topic", "my-sub")
        message = consumer.receive(timeout_millis=5000)
        consumer.acknowledge(message)
"""

import concurrent.futures
import queue
import threading

from twisted.internet import defer
from twisted.python.failure import Failure

from pulsar_twisted.client import errors
from pulsar_twisted.client.client import Client as AsyncClient
from pulsar_twisted.client.consumer import Sub
from pulsar_twisted.client.message_id import MessageId
from pulsar_twisted.client.batch_receive import as_policy

_lock = threading.Lock()
#: Reactor threads we started, by reactor.
_threads = {}


def _reactor(reactor=None):
    """
    ``reactor`` (default: the global one), running: started in a daemon thread unless it already
    runs (an application's own reactor, in another thread). Tests pass a private reactor so the
    global one stays free for trial.
    """
    if reactor is None:
        from twisted.internet import reactor
    with _lock:
        thread = _threads.get(reactor)
        if (thread is not None and thread.is_alive()) or (thread is None and reactor.running):
            return reactor
        started = threading.Event()
        reactor.callWhenRunning(started.set)
        thread = threading.Thread(
            target=reactor.run, kwargs={"installSignalHandlers": False},
            name="pulsar-twisted-reactor", daemon=True)
        _threads[reactor] = thread
        thread.start()
        if not started.wait(10):
            raise errors.PulsarException("the reactor thread did not start")
    return reactor


def _in_reactor_thread(reactor) -> bool:
    thread = _threads.get(reactor)
    if thread is not None:
        return threading.current_thread() is thread
    from twisted.python import threadable
    return threadable.isInIOThread()


def call(reactor, timeout, fn, /, *args, **kwargs):
    """
    Run ``fn(*args, **kwargs)`` in the reactor thread and wait up to ``timeout`` seconds (None:
    forever) for its result or Deferred. Raises what it raised (``Timeout`` when the wait ends;
    the Deferred is then cancelled).
    """
    if _in_reactor_thread(reactor):
        raise errors.PulsarException("blocking call from the reactor thread would deadlock")
    results = queue.Queue(1)
    holder = []

    def run():
        d = defer.maybeDeferred(fn, *args, **kwargs)
        holder.append(d)
        d.addBoth(results.put)

    reactor.callFromThread(run)
    try:
        result = results.get(timeout=timeout)
    except queue.Empty:
        if holder:
            reactor.callFromThread(holder[0].cancel)
        raise errors.Timeout(f"no answer within {timeout}s") from None
    if isinstance(result, Failure):
        if result.check(defer.CancelledError):
            raise errors.Timeout("operation cancelled")
        result.raiseException()
    return result


class _Handle:
    def __init__(self, client, inner):
        self._client = client
        self._inner = inner

    def _call(self, fn, /, *args, timeout="default", **kwargs):
        if timeout == "default":
            timeout = self._client._timeout
        return call(self._client._reactor, timeout, fn, *args, **kwargs)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def close(self):
        self._call(self._inner.close)

    def is_connected(self) -> bool:
        return self._inner.is_connected()

    def topic(self) -> str:
        return self._inner.topic


def _send_arguments(properties, partition_key, ordering_key, sequence_id, replication_clusters,
                    disable_replication, event_timestamp, deliver_at, deliver_after) -> dict:
    """The keyword arguments of the Deferred producer's ``send`` for one blocking send."""
    return dict(properties=properties, partition_key=partition_key, ordering_key=ordering_key,
                sequence_id=sequence_id, replication_clusters=replication_clusters,
                disable_replication=disable_replication, event_timestamp=event_timestamp,
                deliver_at=deliver_at, deliver_after=deliver_after)


class Producer(_Handle):
    """Blocking producer: ``send`` returns the ``MessageId``; ``send_async`` takes a callback."""

    def _send_wait(self):
        producers = getattr(self._inner, "producers", [self._inner])
        send_timeout = producers[0].send_timeout if producers else 0
        if send_timeout <= 0:
            return None
        return send_timeout + self._client._timeout

    # The official client's argument order, so that positional calls mean the same here.
    def send(self, content, properties=None, partition_key=None, ordering_key=None,
             sequence_id=None, replication_clusters=None, disable_replication=False,
             event_timestamp=None, deliver_at=None, deliver_after=None):
        return self._call(self._inner.send, content, timeout=self._send_wait(),
                          **_send_arguments(properties, partition_key, ordering_key, sequence_id,
                                            replication_clusters, disable_replication,
                                            event_timestamp, deliver_at, deliver_after))

    def send_async(self, content, callback, properties=None, partition_key=None,
                   ordering_key=None, sequence_id=None, replication_clusters=None,
                   disable_replication=False, event_timestamp=None, deliver_at=None,
                   deliver_after=None):
        """
        Queue ``content``; ``callback(error, message_id)`` runs on the client's listener thread
        with ``error`` None on success (the official client passes a ``Result`` there).
        """
        kwargs = _send_arguments(properties, partition_key, ordering_key, sequence_id,
                                 replication_clusters, disable_replication, event_timestamp,
                                 deliver_at, deliver_after)
        client = self._client

        def start():
            d = self._inner.send(content, **kwargs)
            if callback is not None:
                d.addCallbacks(lambda mid: client._run_callback(callback, None, mid),
                               lambda f: client._run_callback(callback, f.value, None))
            else:
                d.addErrback(lambda f: None)

        # Queue it in the reactor without waiting for the receipt; block only if the producer
        # queue is full and block_if_queue_full is off (the send then fails at once).
        self._client._reactor.callFromThread(start)

    def flush(self):
        self._call(self._inner.flush)

    def producer_name(self) -> str:
        return self._inner.producer_name

    def last_sequence_id(self) -> int:
        return self._inner.last_sequence_id()


class Consumer(_Handle):
    """Blocking consumer with the official client's method names."""

    def receive(self, timeout_millis: int = None):
        """The next message; ``Timeout`` after ``timeout_millis`` (None: wait forever)."""
        if timeout_millis is None:
            return self._call(self._inner.receive, timeout=None)
        seconds = timeout_millis / 1000.0
        return self._call(self._inner.receive, seconds, timeout=seconds + self._client._timeout)

    def batch_receive(self, policy=None):
        """
        A list of messages within the ``batch_receive_policy`` given to ``subscribe`` (or
        ``policy``): see the Deferred consumer's ``batch_receive``. Possibly empty.
        """
        timeout_ms = as_policy(policy).timeout_ms if policy is not None else \
            self._batch_timeout_ms()
        wait = None if timeout_ms <= 0 else timeout_ms / 1000.0 + self._client._timeout
        return self._call(self._inner.batch_receive, policy, timeout=wait)

    def _batch_timeout_ms(self) -> int:
        policy = getattr(self._inner, "batch_receive_policy", None)
        if policy is None:
            consumers = getattr(self._inner, "consumers", {})
            policy = next((c.batch_receive_policy for c in consumers.values()), None)
        return policy.timeout_ms if policy is not None else 100

    def acknowledge(self, message):
        self._call(self._inner.acknowledge, message)

    def acknowledge_cumulative(self, message):
        self._call(self._inner.acknowledge_cumulative, message)

    def negative_acknowledge(self, message):
        self._call(self._inner.negative_acknowledge, message)

    def redeliver_unacknowledged_messages(self):
        self._call(self._inner.redeliver_unacknowledged_messages)

    def reconsume_later(self, message, delay_seconds: float = 0, properties: dict = None):
        """Send ``message`` to the retry-letter topic (``enable_retry=True``) and ack it here."""
        self._call(self._inner.reconsume_later, message, delay_seconds, properties)

    def topics(self):
        """The topics a pattern (or multi-topic) consumer is subscribed to now."""
        consumers = getattr(self._inner, "consumers", None)
        return sorted(consumers) if consumers is not None else [self._inner.topic]

    def unsubscribe(self):
        self._call(self._inner.unsubscribe)

    def seek(self, target):
        self._call(self._inner.seek, target)

    def get_last_message_id(self) -> MessageId:
        return self._call(self._inner.get_last_message_id)

    def get_broker_stats(self) -> dict:
        """The broker's CONSUMER_STATS of this consumer (rates of its last stats period)."""
        return self._call(self._inner.get_broker_stats)

    def subscription_name(self) -> str:
        return self._inner.subscription_name()


class Reader(_Handle):
    def read_next(self, timeout_millis: int = None):
        if timeout_millis is None:
            return self._call(self._inner.read_next, timeout=None)
        seconds = timeout_millis / 1000.0
        return self._call(self._inner.read_next, seconds, timeout=seconds + self._client._timeout)

    def has_message_available(self) -> bool:
        return self._call(self._inner.has_message_available)

    def seek(self, target):
        self._call(self._inner.seek, target)

    def topic(self) -> str:
        return self._inner.topic_name()


class Client:
    """
    Blocking client. Arguments are those of ``pulsar_twisted.client.client.Client`` (less the
    reactor, which defaults to the global one run in a daemon thread):
    ``operation_timeout_seconds`` also bounds each blocking call.
    """

    def __init__(self, service_url: str, operation_timeout_seconds: float = 30, reactor=None,
                 **kwargs):
        self._reactor = _reactor(reactor)
        self._timeout = operation_timeout_seconds
        self._listeners = concurrent.futures.ThreadPoolExecutor(
            1, thread_name_prefix="pulsar-twisted-listener")
        self._inner = call(self._reactor, self._timeout, AsyncClient, service_url,
                           reactor=self._reactor,
                           operation_timeout_seconds=operation_timeout_seconds, **kwargs)
        self._closed = False

    def _run_callback(self, fn, *args):
        def run():
            try:
                fn(*args)
            except Exception:
                import traceback
                traceback.print_exc()
        self._listeners.submit(run)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def create_producer(self, topic: str, **conf) -> Producer:
        """A ``Producer``; ``conf`` as for the Deferred client's ``create_producer``."""
        inner = call(self._reactor, self._timeout * 2, self._inner.create_producer, topic, **conf)
        return Producer(self, inner)

    def subscribe(self, topic, subscription_name: str, consumer_type=Sub.Exclusive,
                  initial_position=Sub.Latest, message_listener=None, **conf) -> Consumer:
        """
        A ``Consumer``; ``message_listener(consumer, message)`` runs on the listener thread.
        ``topic`` is a name, a list of names or a compiled regex; ``conf`` as for the Deferred
        client's ``subscribe`` (dead_letter_policy, enable_retry, chunking settings, ...).
        """
        consumer = Consumer(self, None)  # the listener may fire before subscribe returns
        listener = None
        if message_listener is not None:
            def listener(_inner, message):
                self._run_callback(message_listener, consumer, message)
        consumer._inner = call(self._reactor, self._timeout * 2, self._inner.subscribe, topic,
                               subscription_name, consumer_type=consumer_type,
                               initial_position=initial_position, message_listener=listener,
                               **conf)
        return consumer

    def create_reader(self, topic: str, start_message_id=MessageId.earliest, **conf) -> Reader:
        inner = call(self._reactor, self._timeout * 2, self._inner.create_reader, topic,
                     start_message_id, **conf)
        return Reader(self, inner)

    def get_topic_partitions(self, topic: str):
        return call(self._reactor, self._timeout, self._inner.get_topic_partitions, topic)

    def close(self):
        """Close producers, consumers and connections (the reactor thread keeps running)."""
        if self._closed:
            return
        self._closed = True
        try:
            call(self._reactor, self._timeout * 2, self._inner.close)
        finally:
            self._listeners.shutdown(wait=False)

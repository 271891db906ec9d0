"""
Producer access modes and the topic epoch, as Pulsar's ``AbstractTopic.incrementTopicEpochIfNeeded``.

- Shared: any number of producers, refused (ProducerBusy) while an exclusive producer holds the
  topic or waits for it.
- Exclusive: only when nobody else produces; else ProducerFenced.
- WaitForExclusive: like Exclusive, but instead of failing the request is queued. Pulsar answers
  it at once with PRODUCER_SUCCESS ``producer_ready=false`` (the official clients then keep the
  request pending without timing out: "has been queued up at broker"), and with a second
  PRODUCER_SUCCESS, ready, when the topic is granted to it (first come, first served).
- ExclusiveWithFencing: closes every current producer (CLOSE_PRODUCER to each) and takes over.

Each grant of exclusive access bumps the topic epoch (answered in PRODUCER_SUCCESS.topic_epoch).
A reconnecting exclusive producer presents the epoch it had: older than the topic's means somebody
else held the topic in between, and it is fenced. The epoch is stored in the managed ledger's
properties (Pulsar's ``pulsar.topic.epoch``) so it survives restarts.
"""

from twisted.internet import defer
from twisted.logger import Logger

from pulsar_twisted.common import errors
from pulsar_twisted.proto import PulsarApi_pb2 as api

EPOCH_PROPERTY = "pulsar.topic.epoch"
EXCLUSIVE_MODES = (api.Exclusive, api.WaitForExclusive, api.ExclusiveWithFencing)


class ProducerAccess:
    """The access-mode bookkeeping of one topic. ``acquire`` decides; ``released`` hands over."""

    log = Logger()

    # Slots: one per loaded topic (issue 14: a 64-byte block instead of 112 with an instance
    # dictionary; the ledger is the topic's, not a slot of its own, which took an 80-byte block).
    __slots__ = ("topic", "epoch", "exclusive", "waiting")

    def __init__(self, topic, ledger=None):
        """``ledger``: the topic's managed ledger (persistent topics), whose properties hold the
        epoch."""
        self.topic = topic
        self.epoch = -1
        if ledger is not None:
            try:
                self.epoch = int(ledger.properties.get(EPOCH_PROPERTY, -1))
            except (TypeError, ValueError):
                self.epoch = -1
        #: Name of the producer holding exclusive access, or None.
        self.exclusive = None
        #: Queued WaitForExclusive requests: (Deferred, grant, connection) in arrival order; an empty
        #: tuple while none (no list per loaded topic, issue 14).
        self.waiting = ()

    @property
    def ledger(self):
        """The topic's managed ledger, None for a non-persistent topic."""
        return getattr(self.topic, "ledger", None)

    def acquire(self, cnx, request, name: str, create):
        """
        Admit a producer of ``request`` (a ProducerRequest; mode in ``request.access_mode``).
        ``create()`` builds and registers the Producer; the result is it, or a Deferred of it (exclusive modes
        store the new epoch first; WaitForExclusive waits for its turn). Raises ProducerBusy /
        ProducerFenced as Pulsar does.
        """
        mode = request.access_mode
        producers = self.topic.producers
        if mode == api.Shared:
            if self.exclusive is not None or self.waiting:
                raise errors.ProducerBusy(
                    f"Topic has an existing exclusive producer: {self.exclusive or '(waiting)'}")
            producer = create()
            producer.topic_epoch = self.epoch if self.epoch >= 0 else None
            return producer
        requested_epoch = request.topic_epoch
        if mode == api.Exclusive:
            if self.exclusive is not None or self.waiting:
                raise errors.ProducerFenced(f"Topic has an existing exclusive producer: {self.exclusive}")
            if producers:
                raise errors.ProducerFenced("Topic has existing shared producers")
            self._check_epoch(requested_epoch)
            return self._grant(name, requested_epoch, create)
        if mode == api.ExclusiveWithFencing:
            self._check_epoch(requested_epoch)
            # Claimed first, so the producers removed below hand nothing over to waiters.
            self.exclusive = name
            waiting, self.waiting = self.waiting, ()
            for waiter, _, _ in waiting:
                waiter.errback(errors.ProducerFenced("Fenced by an ExclusiveWithFencing producer"))
            for other in list(producers.values()):
                self.log.info("{topic}: fencing producer {producer} for an ExclusiveWithFencing producer",
                              topic=self.topic.name, producer=other.name)
                self.topic.evict_producer(other)
            return self._grant(name, requested_epoch, create)
        if mode == api.WaitForExclusive:
            if self.exclusive is not None or producers or self.waiting:
                d = defer.Deferred()
                if not self.waiting:
                    self.waiting = []
                self.waiting.append((d, lambda: self._grant(name, None, create), cnx))
                waits = getattr(cnx, "waiting_for_exclusive", None)
                if waits is not None:
                    waits.add(self.topic)
                self.log.info("{topic}: producer {producer} queued waiting for exclusive access",
                              topic=self.topic.name, producer=name)
                # Pulsar's immediate answer: the request is alive, the producer not ready yet.
                cnx.sender.send_producer_success(request.request_id, name, -1, ready=False)
                return d
            self._check_epoch(requested_epoch)
            return self._grant(name, requested_epoch, create)
        raise errors.NotAllowedError(f"Unknown producer access mode {mode}")

    def _check_epoch(self, requested_epoch) -> None:
        # The epoch travels as a uint64 and the next grant adds one: refuse a claim that leaves no
        # room (found by fuzzing: 2**64-1 made the next PRODUCER_SUCCESS unencodable).
        if requested_epoch is not None and requested_epoch >= 2**63 - 1:
            raise errors.NotAllowedError(f"Invalid topic epoch {requested_epoch}")
        if requested_epoch is not None and requested_epoch < self.epoch:
            raise errors.ProducerFenced(
                f"Topic epoch has already moved. Current epoch: {self.epoch}, Producer epoch: {requested_epoch}")

    def _grant(self, name: str, requested_epoch, create):
        self.exclusive = name
        epoch = requested_epoch if requested_epoch is not None else self.epoch + 1
        d = self._store_epoch(epoch)

        def stored(_):
            if self.topic.closed:
                self.exclusive = None
                raise errors.ServiceNotReady(f"Topic {self.topic.name} is being unloaded")
            producer = create()
            producer.topic_epoch = epoch
            return producer

        def failed(failure):
            if self.exclusive == name:
                self.exclusive = None
            return failure

        d.addCallbacks(stored, failed)
        return d

    def _store_epoch(self, epoch: int):
        self.epoch = epoch
        if self.ledger is None:
            return defer.succeed(None)
        properties = dict(self.ledger.properties)
        properties[EPOCH_PROPERTY] = str(epoch)
        return self.ledger.set_properties(properties)

    def released(self, producer) -> None:
        """``producer`` left the topic: free exclusive access and grant it to the next waiter."""
        if producer.name == self.exclusive:
            self.exclusive = None
        if self.exclusive is not None or self.topic.producers or not self.waiting:
            return
        waiter, grant, _ = self.waiting.pop(0)
        d = defer.maybeDeferred(grant)
        d.chainDeferred(waiter)

    def close(self) -> None:
        """Topic unloading: the queued requests fail (the clients retry on the new owner)."""
        waiting, self.waiting = self.waiting, ()
        for waiter, _, _ in waiting:
            waiter.errback(errors.ServiceNotReady(f"Topic {self.topic.name} is being unloaded"))

    def forget_waiting(self, cnx) -> None:
        """``cnx`` closed: its queued WaitForExclusive requests leave the queue (they would
        otherwise count as waitingPublishers and keep Shared and Exclusive producers out), and
        the next waiter gets the topic if it is free."""
        gone = [item for item in self.waiting if item[2] is cnx]
        if not gone:
            return
        self.waiting = [item for item in self.waiting if item[2] is not cnx]
        for waiter, _, _ in gone:
            waiter.errback(errors.ServiceNotReady("The connection of the waiting producer closed"))
        if self.exclusive is None and not self.topic.producers and self.waiting:
            waiter, grant, _ = self.waiting.pop(0)
            defer.maybeDeferred(grant).chainDeferred(waiter)

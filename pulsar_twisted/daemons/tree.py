"""
The service tree every daemon is built as (Twisted's ``MultiService``, ordered).

Buildbot's ``AsyncMultiService`` starts its children side by side; a Pulsar daemon cannot: the
bookie needs the metadata store, the managed ledgers need the bookie, the broker needs the
managed ledgers, and the plain binary port must open last because its opening is the signal that
the daemon is ready. ``OrderedMultiService`` starts each child once the one before has started
and stops them in reverse, each once the one after it has stopped.

``Step`` and ``ListeningService`` are the small children the daemons are made of: a part that is
not a Service itself (a metadata store, a ledger client), and a listening port. Both take
callables rather than objects because each part is built from the parts started before it.
"""

from twisted.application.service import MultiService, Service
from twisted.internet import defer
from twisted.logger import Logger


class OrderedMultiService(MultiService):
    """
    A MultiService whose children start one after another, in the order they were added (a child's
    ``startService`` may return a Deferred: the next child waits for it), and stop in reverse.

    ``startService`` returns a Deferred firing once the last child has started. When a child fails
    to start, the children already started are stopped (in reverse) and the Deferred fails with
    that child's failure. ``stopService`` during start-up cancels the start in progress, waits for
    the started children to be stopped, and returns a Deferred firing when that is done. Children
    are meant to be added before the tree starts (one added to a running tree starts at once, as
    in MultiService, out of order).
    """

    log = Logger()

    def __init__(self):
        super().__init__()
        self._started_children = []   # children started, in start order
        self._starting = None    # the Deferred of the child start in progress
        self._start_done = None  # fires (with None) when the start-up run has ended
        self.stopping_child = None  # the child whose stopService is awaited, if any

    def startService(self):
        Service.startService(self)
        self._start_done = defer.Deferred()
        starting = defer.Deferred.fromCoroutine(self._start_children())
        starting.addBoth(self._start_ended)
        return starting

    def _start_ended(self, result):
        done, self._start_done = self._start_done, None
        done.callback(None)
        return result

    async def _start_children(self):
        try:
            for child in list(self):
                self._starting = defer.maybeDeferred(child.startService)
                try:
                    await self._starting
                finally:
                    self._starting = None
                self._started_children.append(child)
                if not self.running:
                    raise defer.CancelledError(f"stopped while {child.name} started")
        except BaseException:
            await self._stop_children()
            raise

    def stopService(self):
        Service.stopService(self)
        return defer.Deferred.fromCoroutine(self._stop())

    async def _stop(self):
        if self._start_done is not None:
            # Still starting: end that run; it stops what it started before it finishes.
            done = self._start_done
            if self._starting is not None:
                self._starting.cancel()
            await done
        await self._stop_children()

    async def _stop_children(self):
        while self._started_children:
            child = self._started_children.pop()
            self.stopping_child = child
            try:
                await defer.maybeDeferred(child.stopService)
            except Exception:
                self.log.failure("stopping {child} failed", child=child.name)
            finally:
                self.stopping_child = None

    def not_stopped(self) -> list:
        """Names of the children still to stop (the one stopping now first), for a warning."""
        pending = [] if self.stopping_child is None else [self.stopping_child]
        return [child.name for child in pending + list(reversed(self._started_children))]


class Step(Service):
    """
    A part of a daemon that is not a Service itself. ``start()`` is called when the tree reaches
    this step and ``stop()`` when the tree stops it (only after ``start()`` succeeded); each may
    be None, return a Deferred, or be a coroutine function.
    """

    def __init__(self, name: str, start=None, stop=None):
        self.name = name
        self._start = start
        self._stop = stop

    def startService(self):
        super().startService()
        return defer.maybeDeferred(self._start) if self._start is not None else defer.succeed(None)

    def stopService(self):
        super().stopService()
        return defer.maybeDeferred(self._stop) if self._stop is not None else defer.succeed(None)


class ListeningService(Service):
    """
    Listens on ``endpoint()`` with ``factory()`` while running (both called at start, when the
    parts they serve exist). ``port`` is the IListeningPort while listening. ``startService``
    fails when the endpoint cannot listen (port in use, bad certificate), which fails the tree's
    start-up; ``stopService`` fires once the port is closed.
    """

    def __init__(self, name: str, endpoint, factory):
        self.name = name
        self._endpoint = endpoint
        self._factory = factory
        self.port = None

    def startService(self):
        super().startService()
        d = defer.maybeDeferred(lambda: self._endpoint().listen(self._factory()))
        d.addCallback(self._listening)
        return d

    def _listening(self, port):
        self.port = port

    def stopService(self):
        super().stopService()
        port, self.port = self.port, None
        if port is None:
            return defer.succeed(None)
        return defer.maybeDeferred(port.stopListening)

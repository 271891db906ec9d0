"""
The cluster's leader broker: an ephemeral ``/loadbalance/leader`` node (Pulsar's path) holding
``{"brokerId": "<host>:<webport>", "serviceUrl": "http://<host>:<webport>"}`` (Pulsar's
``LeaderBroker``), what ``GET /admin/v2/brokers/leaderBroker`` answers.

Election: every cluster broker tries to create the node (the create is the lock: one wins); the
others retry when it is deleted (store notification: the leader stopped or its session expired),
after their own session was renewed, and every ``check_interval`` seconds (a missed notification).
Nothing in this broker depends on being the leader yet: the node only names one broker, stably,
for the admin API and operators. Standalone brokers elect nobody; they answer themselves.
"""

import json

from twisted.internet import defer, task
from twisted.logger import Logger

from pulsar_twisted.metadata.interfaces import AlreadyExistsError
from pulsar_twisted.metadata.layout import LEADER_PATH

log = Logger()


def leader_data(broker_id: str, service_url: str) -> bytes:
    return json.dumps({"brokerId": broker_id, "serviceUrl": service_url}, sort_keys=True).encode()


async def read_leader(store):
    """The leader's ``{"brokerId", "serviceUrl"}``, or None when there is none (or it is junk)."""
    node = await store.get(LEADER_PATH)
    if node is None:
        return None
    try:
        data = json.loads(node[0])
        if isinstance(data, dict) and data.get("brokerId"):
            return {"brokerId": str(data["brokerId"]), "serviceUrl": str(data.get("serviceUrl", ""))}
    except ValueError:
        pass
    log.warn("unreadable leader node {path}: {raw!r}", path=LEADER_PATH, raw=node[0][:200])
    return None


class LeaderElection:
    """One broker's candidacy (see the module docstring). ``start()`` / ``stop()`` (Deferreds)."""

    def __init__(self, store, clock, broker_id: str, service_url: str, check_interval: float = 5.0):
        self.store = store
        self.clock = clock
        self.broker_id = broker_id
        self._value = leader_data(broker_id, service_url)
        self.check_interval = check_interval
        self.is_leader = False
        self._loop = None
        self._running = False
        self._electing = None

    def start(self) -> defer.Deferred:
        self._running = True
        self.store.register_listener(self._on_notification)
        self.store.register_session_listener(self._on_session)
        if self.check_interval > 0:
            self._loop = task.LoopingCall(self.elect)
            self._loop.clock = self.clock
            self._loop.start(self.check_interval, now=False).addErrback(
                lambda f: log.failure("leader election loop stopped", f))
        return self.elect()

    def stop(self) -> defer.Deferred:
        """Stop competing; a leader deletes its node so that another broker takes over now."""
        self._running = False
        if self._loop is not None and self._loop.running:
            self._loop.stop()
        if not self.is_leader:
            return defer.succeed(None)
        self.is_leader = False
        return self.store.delete(LEADER_PATH).addErrback(lambda f: None)

    def elect(self) -> defer.Deferred:
        """Become the leader if there is none; Deferred[bool] (is this broker the leader)."""
        if not self._running:
            return defer.succeed(False)
        electing = self._electing
        if electing is None:
            # One attempt at a time; concurrent callers share its answer.
            electing = self._electing = defer.Deferred.fromCoroutine(self._elect())
            electing.addBoth(self._elected)
        d = defer.Deferred()
        electing.addBoth(lambda r: (d.callback(r), r)[1])
        return d

    def _elected(self, result):
        self._electing = None
        if not isinstance(result, bool):
            log.warn("leader election failed: {error}", error=result.getErrorMessage())
            return False
        return result

    async def _elect(self) -> bool:
        node = await self.store.get(LEADER_PATH)
        if node is None:
            try:
                await self.store.put(LEADER_PATH, self._value, expected_version=-1, ephemeral=True)
            except AlreadyExistsError:
                node = await self.store.get(LEADER_PATH)
            else:
                node = (self._value, None)
        was, self.is_leader = self.is_leader, node is not None and node[0] == self._value
        if self.is_leader and not was:
            log.info("this broker ({id}) is the cluster's leader broker", id=self.broker_id)
        elif was and not self.is_leader:
            log.warn("this broker ({id}) is no longer the leader broker", id=self.broker_id)
        return self.is_leader

    def _on_notification(self, notification) -> None:
        if notification.path == LEADER_PATH and notification.kind == "deleted":
            self.elect()

    def _on_session(self, state: str) -> None:
        if state == "lost":
            self.is_leader = False      # the node went with the session
        elif state == "expired-new-session":
            self.elect()


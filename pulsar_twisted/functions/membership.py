"""
Several functions workers sharing one cluster, as Pulsar's do (its LeaderService,
MembershipManager and RoundRobinScheduler):

- every worker subscribes Failover to the coordination topic (``clusterCoordinationTopicName``,
  subscription ``participants``, consumer name = its workerId, its HTTP address in the consumer's
  metadata); the broker's active consumer is the leader (the client learns it from
  ACTIVE_CONSUMER_CHANGE, ``Consumer.is_active``);
- membership is that subscription's consumers, read from the brokers' topic stats every
  ``failureCheckFreqMs``; a worker missing for ``rescheduleTimeoutMs`` has left;
- the leader assigns instances (``schedule``) and publishes the assignments; every worker runs
  what is assigned to it.
"""

import json
from urllib.parse import quote

from twisted.internet import defer, task
from twisted.logger import Logger
from twisted.web.client import Agent, readBody

from pulsar_twisted.client.consumer import Sub
from pulsar_twisted.common.naming import parse_topic

SUBSCRIPTION = "participants"
#: The consumer metadata key carrying a worker's HTTP address (Pulsar puts host:port in the name).
URL_PROPERTY = "workerUrl"
#: Seconds between looks at the consumer's active flag.
LEADER_POLL = 0.25


def schedule(instances, current: dict, workers) -> dict:
    """Pulsar's RoundRobinScheduler: ``instances`` (hashable ids) over ``workers``. An instance
    keeps its worker while that worker lives; the others go one by one to the least loaded worker
    (ties: the smallest id). ``{instance: worker}``; empty without workers."""
    workers = sorted(set(workers))
    if not workers:
        return {}
    chosen = {i: current[i] for i in instances if current.get(i) in workers}
    load = {w: 0 for w in workers}
    for w in chosen.values():
        load[w] += 1
    for i in instances:
        if i not in chosen:
            w = min(workers, key=lambda w: (load[w], w))
            chosen[i] = w
            load[w] += 1
    return chosen


class Coordinator:
    """This worker's view of the worker cluster: ``is_leader``, ``members`` (workerId -> HTTP
    url of the live workers), ``leader_url``. ``on_change()`` is called when leadership or the
    live set changes (and on the first check)."""

    log = Logger()

    def __init__(self, client, clock, topic: str, worker_id: str, worker_url: str,
                 admin_url: str, check_interval: float = 30.0, reschedule_timeout: float = 60.0,
                 agent=None, on_change=None):
        self.client = client
        self.clock = clock
        self.topic = topic
        self.worker_id = worker_id
        self.worker_url = worker_url
        self.admin_url = admin_url.rstrip("/")
        self.check_interval = check_interval
        self.reschedule_timeout = reschedule_timeout
        self.agent = agent if agent is not None else Agent(clock)
        self.on_change = on_change
        self.consumer = None
        self.members = {worker_id: worker_url}
        self.leader_name = None
        self._seen = {}                 # workerId -> (url, last time seen)
        self._state = None
        self._loop = self._leader_loop = None
        self._checking = False

    @property
    def is_leader(self) -> bool:
        return bool(self.consumer is not None and self.consumer.is_active)

    @property
    def leader_url(self):
        """The leader's HTTP address; None while none is known, and while the broker's stats
        name this worker but its consumer has not been told yet: the broker makes a Failover
        consumer active at once and tells it activeConsumerFailoverDelayTimeMillis later (as
        Pulsar does), so just after a re-subscription a worker would forward a write to itself
        and refuse it there as not the leader."""
        if self.is_leader:
            return self.worker_url
        if not self.leader_name or self.leader_name == self.worker_id:
            return None
        return self.members.get(self.leader_name)

    async def start(self) -> None:
        self.consumer = await self.client.subscribe(
            self.topic, SUBSCRIPTION, consumer_type=Sub.Failover, consumer_name=self.worker_id,
            properties={URL_PROPERTY: self.worker_url})
        # The broker tells every Failover consumer whether it is active right after subscribing:
        # wait for that word (bounded), so the first check knows who leads.
        waited = 0.0
        while self.consumer.is_active is None and waited < self.check_interval:
            await task.deferLater(self.clock, 0.05, lambda: None)
            waited += 0.05
        await self.check()
        self._loop = task.LoopingCall(self._tick)
        self._loop.clock = self.clock
        self._loop.start(self.check_interval, now=False)
        # The client keeps the broker's last ACTIVE_CONSUMER_CHANGE in ``is_active``: a cheap
        # look several times a second turns a leadership change into a check at once.
        self._leader_loop = task.LoopingCall(self._leadership)
        self._leader_loop.clock = self.clock
        self._leader_loop.start(LEADER_POLL, now=False)

    def _leadership(self):
        if self._state is not None and self.is_leader != self._state[0]:
            self._tick()

    def _tick(self):
        if self._checking:
            return
        self._checking = True
        d = defer.ensureDeferred(self.check())
        d.addErrback(lambda f: self.log.warn("membership check failed: {e}", e=f.getErrorMessage()))
        d.addBoth(lambda _: setattr(self, "_checking", False))

    def _stats_url(self) -> str:
        name = parse_topic(self.topic)
        return (f"{self.admin_url}/admin/v2/{name.domain}/{quote(name.tenant, safe='')}/"
                f"{quote(name.namespace, safe='')}/{quote(name.local_name, safe='')}/stats")

    async def wait_for_leader(self, timeout: float):
        """The leader's URL, checking again every ``LEADER_POLL`` seconds for up to ``timeout``
        while none is known (a leader just gone, the broker not yet told the next). None: still
        none."""
        waited = 0.0
        while self.leader_url is None and waited < timeout:
            await task.deferLater(self.clock, LEADER_POLL, lambda: None)
            waited += LEADER_POLL
            await self.check()
        return self.leader_url

    async def wait_until_told(self, timeout: float) -> bool:
        """Whether this worker leads, once its consumer has been told: while the brokers' stats
        name it but the word has not come yet (the failover delay), look again every
        ``LEADER_POLL`` seconds, for up to ``timeout``."""
        waited = 0.0
        while not self.is_leader and self.leader_name == self.worker_id and waited < timeout:
            await task.deferLater(self.clock, LEADER_POLL, lambda: None)
            waited += LEADER_POLL
            await self.check()
        return self.is_leader

    async def fetch(self):
        """``(active consumer name, {workerId: url})`` from the brokers' stats of the topic."""
        response = await self.agent.request(b"GET", self._stats_url().encode("ascii"))
        body = await readBody(response)
        if response.code != 200:
            raise RuntimeError(f"HTTP {response.code} {body[:200]!r}")
        sub = json.loads(body).get("subscriptions", {}).get(SUBSCRIPTION, {})
        found = {}
        for consumer in sub.get("consumers", []):
            name = consumer.get("consumerName")
            url = (consumer.get("metadata") or {}).get(URL_PROPERTY)
            if name and url:
                found[name] = url
        return sub.get("activeConsumerName"), found

    async def check(self) -> None:
        now = self.clock.seconds()
        try:
            self.leader_name, found = await self.fetch()
        except Exception as e:
            # Not knowing is not "they left": the view stays as it was (the leader would
            # otherwise take every instance while the brokers' web service is away).
            self.log.warn("reading the worker membership failed: {e}", e=e)
            found = {w: url for w, (url, _) in self._seen.items()}
            for worker in found:
                self._seen[worker] = (found[worker], now)
        found[self.worker_id] = self.worker_url
        for worker, url in found.items():
            self._seen[worker] = (url, now)
        self._seen = {w: (url, t) for w, (url, t) in self._seen.items()
                      if now - t < self.reschedule_timeout or w in found}
        self.members = {w: url for w, (url, _) in self._seen.items()}
        state = (self.is_leader, tuple(sorted(self.members.items())))
        if state != self._state:
            self._state = state
            self.log.info("functions worker {me}: leader={leader}, workers {workers}",
                          me=self.worker_id, leader=self.is_leader, workers=sorted(self.members))
            if self.on_change is not None:
                self.on_change()

    async def close(self) -> None:
        for loop in (self._loop, self._leader_loop):
            if loop is not None and loop.running:
                loop.stop()
        if self.consumer is not None:
            try:
                await self.consumer.close()
            except Exception:
                pass


class SoloCoordinator:
    """One worker alone (tests, and a standalone that shares its metadata with no other worker):
    always the leader, the only member."""

    def __init__(self, worker_id: str, worker_url: str, on_change=None):
        self.worker_id = worker_id
        self.worker_url = worker_url
        self.on_change = on_change
        self.members = {worker_id: worker_url}
        self.is_leader = True
        self.leader_url = worker_url

    async def start(self) -> None:
        if self.on_change is not None:
            self.on_change()

    async def wait_for_leader(self, timeout: float):
        return self.leader_url

    async def close(self) -> None:
        pass

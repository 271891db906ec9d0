"""
``LoadManager``: one cluster broker's part of the load manager, run every ``interval`` seconds
(``loadBalancerHostUsageCheckIntervalMinutes``).

Every broker: samples its host and topics, rewrites its report (its ``/loadbalance/brokers/<id>``
registration node, keeping the registration's fields) when ``reports.needs_update`` says so,
splits its own bundles over the ``loadBalancerNamespaceBundleMax*`` limits (and unloads the
halves with ``loadBalancerAutoUnloadSplitBundlesEnabled``), and answers the placement of free
bundles it is asked about (``place``, the ownership's ``placement``; see below).

The leader (``LeaderElection.is_leader``) also folds every report into the bundle data (written
under ``/loadbalance/bundle-data`` every ``loadBalancerResourceQuotaUpdateIntervalMinutes``) and
runs the ThresholdShedder every ``loadBalancerSheddingIntervalMinutes``, asking the owners to
unload what it picks (``BundleOwnership.request_unload``).

Placement is the leader's, as in Pulsar's NamespaceService (``searchForCandidateBroker``): a
broker asked about a free bundle that is not the leader forwards the lookup to the leader broker
(a Redirect with ``authoritative`` false); the leader picks the broker with
LeastLongTermMessageRate over its aggregated bundle data and its preallocations (bundles it just
assigned, not yet in their broker's report: ModularLoadManagerImpl's
``preallocatedBundleToBroker``) and redirects the client there with ``authoritative`` true; that
broker takes the bundle without placing it again. Every placement the leader makes is in the
decisions log. When no leader is known, or its registration is gone (it died or lost its
session and no broker has been elected yet), the broker asked places the bundle itself over the
same inputs (Pulsar's "decentralized" fallback; a warning says so), so that lookups still
converge while the leadership changes hands.
"""

import json
import random

from twisted.internet import defer, task
from twisted.logger import Logger

from pulsar_twisted.broker.loadbalance import reports as rep
from pulsar_twisted.broker.loadbalance import split as splits
from pulsar_twisted.broker.loadbalance.bundle_data import BundleDataAggregator, bundle_data_path
from pulsar_twisted.broker.loadbalance.placement import choose_broker
from pulsar_twisted.broker.loadbalance.shedding import ShedderSettings, ThresholdShedder
from pulsar_twisted.broker.leader import read_leader
from pulsar_twisted.broker.ownership import topic_hash
from pulsar_twisted.metadata.interfaces import MetadataStoreError, MetadataUnavailableError
from pulsar_twisted.metadata.layout import BROKERS_ROOT, OWNERSHIP_ROOT, broker_path

log = Logger()


def urls_of_report(report: dict) -> dict:
    """A report's URLs under the ownership nodes' (NamespaceEphemeralData) names."""
    return {"nativeUrl": report.get("pulsarServiceUrl", ""),
            "nativeUrlTls": report.get("pulsarServiceUrlTls", ""),
            "httpUrl": report.get("webServiceUrl", ""), "httpUrlTls": report.get("webServiceUrlTls", ""),
            "disabled": False, "advertisedListeners": report.get("advertisedListeners") or {}}


class LoadManager:
    """See the module doc. ``base`` is the registration's document (dict); ``registration`` the
    BrokerRegistration whose node the reports rewrite (its ``data`` follows them); ``leader`` a
    LeaderElection; ``decisions`` a DecisionLog. ``start()`` / ``stop()``."""

    def __init__(self, broker, ownership, store, clock, config, broker_id: str, base: dict,
                 registration=None, leader=None, decisions=None, host=None, interval: float = None,
                 rng=None):
        self.broker = broker
        self.ownership = ownership
        self.store = store
        self.clock = clock
        self.config = config
        self.broker_id = broker_id
        self.base = dict(base)
        self.registration = registration
        self.leader = leader
        self.decisions = decisions
        self.host = host or rep.HostUsage(clock)
        self.interval = interval if interval is not None else 60.0 * config.loadBalancerHostUsageCheckIntervalMinutes
        self.rng = rng or random.Random()
        self.shedder = ThresholdShedder(ShedderSettings.from_config(config))
        self.aggregator = BundleDataAggregator()
        #: bundle name -> (broker id, when): the leader's assignments not yet in that broker's
        #: report (Pulsar's preallocatedBundleToBroker); see ``_prune_preallocations``.
        self.preallocated = {}
        #: The preallocated bundles whose ownership node was created since: they count in their
        #: broker's score until its report lists them, but a new placement (the bundle unloaded
        #: meanwhile) is not bound to the earlier answer.
        self._taken = set()
        store.register_listener(self._on_notification)
        self.last_report = None
        self._last_written = None   # (time, report)
        self._last_shed = None
        self._last_bundle_data = None
        self._loop = None

    # ---------------------------------------------------------------- lifecycle
    def start(self) -> None:
        if self.interval > 0:
            self._loop = task.LoopingCall(self.tick)
            self._loop.clock = self.clock
            self._loop.start(self.interval, now=False).addErrback(
                lambda f: log.failure("load manager loop stopped", f))

    def stop(self) -> None:
        if self._loop is not None and self._loop.running:
            self._loop.stop()

    def tick(self) -> defer.Deferred:
        """One round (see the module doc); errors are logged, the loop goes on."""
        d = defer.Deferred.fromCoroutine(self._tick())
        d.addErrback(self._round_failed)
        return d

    @staticmethod
    def _round_failed(failure) -> None:
        # Metadata out of reach (a lost ZooKeeper connection) is an expected outage, a warning as
        # the registration check and the leader election give; anything else is a bug, with its
        # traceback.
        if failure.check(MetadataUnavailableError):
            log.warn("load manager round failed: {error}", error=failure.getErrorMessage())
        else:
            log.failure("load manager round failed", failure)

    async def _tick(self):
        await self.write_report()
        if self.config.loadBalancerAutoBundleSplitEnabled:
            await self.split_hot_bundles()
        if self.leader is not None and self.leader.is_leader:
            await self.lead()
        else:
            await self.read_bundle_data(await self.read_reports())

    # ---------------------------------------------------------------- reports
    def current_report(self) -> dict:
        """This broker's LocalBrokerData now."""
        ownership = self.ownership
        bundles = list(ownership.owned.values())
        load = rep.broker_load(self.broker, rep.owned_bundle_finder(bundles))
        owned = [str(b) for b in bundles]
        nic = self.config.loadBalancerOverrideBrokerNicSpeedGbps * 1024 * 1024
        self.last_report = rep.local_broker_data(self.base, self.host.sample(), load, owned,
                                                 int(self.clock.seconds() * 1000), nic)
        return self.last_report

    async def write_report(self, force: bool = False) -> bool:
        """Rewrite the registration node when Pulsar's thresholds say so; True when written."""
        report = self.current_report()
        now = self.clock.seconds()
        last_time, last = self._last_written or (None, None)
        c = self.config
        if not force and not rep.needs_update(
                last, report, now - last_time if last_time is not None else 0.0,
                c.loadBalancerReportUpdateThresholdPercentage,
                60.0 * c.loadBalancerReportUpdateMaxIntervalMinutes,
                c.loadBalancerReportUpdateMinIntervalMillis / 1000.0):
            return False
        data = json.dumps(report, sort_keys=True).encode()
        if self.registration is not None:
            self.registration.data = data
        await self.store.put(broker_path(self.broker_id), data, ephemeral=True)
        self._last_written = (now, report)
        return True

    async def read_reports(self) -> dict:
        """broker id -> LocalBrokerData of every registered broker (unreadable ones skipped)."""
        out = {}
        for broker in await self.store.get_children(BROKERS_ROOT) or []:
            node = await self.store.get(broker_path(broker))
            if node is None:
                continue
            try:
                report = json.loads(node[0])
            except ValueError:
                continue
            if isinstance(report, dict):
                out[broker] = report
        return out

    async def read_bundle_data(self, reports: dict) -> dict:
        """A broker that is not the leader: the leader's bundle data of every bundle the reports
        name, read from ``/loadbalance/bundle-data`` (what its placements score with)."""
        data = {}
        for report in reports.values():
            for bundle in report.get("bundles") or []:
                node = await self.store.get(bundle_data_path(bundle))
                try:
                    value = json.loads(node[0]) if node is not None else None
                except ValueError:
                    value = None
                if isinstance(value, dict):
                    data[bundle] = value
        self.aggregator.data = data
        return data

    # ---------------------------------------------------------------- placement
    #: Seconds a preallocation is kept when its broker neither reports the bundle nor leaves
    #: (the client never came): at least this, or two rounds of the load manager.
    preallocation_seconds = 60.0

    def place(self, bundle) -> defer.Deferred:
        """Deferred[None: take ``bundle`` here, or the urls dict (``urls_of_report``) of the
        broker to redirect the lookup to, with ``authoritative``: False when that is the
        leader, asked to place the bundle; True when it is the broker chosen to own it]."""
        return defer.Deferred.fromCoroutine(self._place(bundle))

    async def _place(self, bundle):
        if not self.config.loadBalancerEnabled:
            return None
        reports = await self.read_reports()
        if self.last_report is not None:
            reports[self.broker_id] = self.last_report   # our own, fresher than the node
        if self.leader is not None and not self.leader.is_leader:
            current = await read_leader(self.store)
            leader_id = current["brokerId"] if current is not None else None
            if leader_id is not None and leader_id != self.broker_id and leader_id in reports:
                # Pulsar's non-leader: the leader decides; not authoritative, so that the
                # client's lookup there is placed rather than taken.
                return dict(urls_of_report(reports[leader_id]), authoritative=False)
            if leader_id != self.broker_id:
                why = ("no leader broker is elected" if leader_id is None
                       else f"the leader broker {leader_id} is not registered")
                log.warn("placing bundle {bundle} on this broker's load data: {why} "
                         "(decentralized placement)", bundle=str(bundle), why=why)
                return await self._assign(bundle, reports, f"{why}: placed by the broker asked")
        return await self._assign(bundle, reports, "")

    def _prune_preallocations(self, reports: dict, now: float) -> None:
        """Forget assignments their broker now reports (it owns the bundle), of brokers no longer
        registered, and older than ``preallocation_seconds`` (or two rounds)."""
        horizon = now - max(self.preallocation_seconds, 2 * self.interval)
        for name, (broker, at) in list(self.preallocated.items()):
            report = reports.get(broker)
            if report is None or name in (report.get("bundles") or ()) or at < horizon:
                del self.preallocated[name]
                self._taken.discard(name)

    def _on_notification(self, notification) -> None:
        if notification.kind == "created" and notification.path.startswith(OWNERSHIP_ROOT + "/"):
            name = notification.path[len(OWNERSHIP_ROOT) + 1:]
            if name in self.preallocated:
                self._taken.add(name)

    async def _assign(self, bundle, reports: dict, fallback: str):
        """The leader's choice (or the fallback's, ``fallback`` its reason) for ``bundle``."""
        name, now = str(bundle), self.clock.seconds()
        self._prune_preallocations(reports, now)
        earlier = self.preallocated.get(name) if name not in self._taken else None
        if earlier is not None:
            # Assigned already, the client is on its way there (or another client asks): the
            # same answer, as Pulsar's selectBrokerForAssignment gives a preallocated bundle.
            chosen = earlier[0]
        else:
            by_broker = {}
            for other, (broker, _) in self.preallocated.items():
                by_broker.setdefault(broker, set()).add(other)
            chosen, scores = choose_broker(
                reports, self.aggregator.data, by_broker,
                self.config.loadBalancerBrokerOverloadedThresholdPercentage / 100.0, self.rng)
            if chosen is None:
                return None
            self.preallocated[name] = (chosen, now)
            self._taken.discard(name)
            equals = sorted(b for b, s in scores.items() if s == scores[chosen])
            if scores[chosen] == float("inf"):
                reason = "every broker is overloaded: drawn among all"
            elif len(equals) > 1:
                reason = f"LeastLongTermMessageRate: {len(equals)} brokers score the same, drawn among them"
            else:
                reason = "LeastLongTermMessageRate: lowest long-term message rate among brokers not overloaded"
            if fallback:
                reason = f"{fallback}; {reason}"
            self._record("placement", bundle, reason, target=chosen,
                         scores={b: (s if s != float("inf") else "overloaded") for b, s in scores.items()})
        if chosen == self.broker_id:
            return None
        return dict(urls_of_report(reports[chosen]), authoritative=True)

    # ---------------------------------------------------------------- splits
    def _split_reason(self, stats: dict):
        c = self.config
        topics = int(stats.get("topics") or 0)
        sessions = int(stats.get("producerCount") or 0) + int(stats.get("consumerCount") or 0)
        rate = float(stats.get("msgRateIn") or 0) + float(stats.get("msgRateOut") or 0)
        throughput = float(stats.get("msgThroughputIn") or 0) + float(stats.get("msgThroughputOut") or 0)
        if topics < 2:
            return None     # one topic cannot be divided between brokers
        if topics > c.loadBalancerNamespaceBundleMaxTopics:
            return f"{topics} topics > loadBalancerNamespaceBundleMaxTopics"
        if c.loadBalancerNamespaceBundleMaxSessions > 0 and sessions > c.loadBalancerNamespaceBundleMaxSessions:
            return f"{sessions} sessions > loadBalancerNamespaceBundleMaxSessions"
        if rate > c.loadBalancerNamespaceBundleMaxMsgRate:
            return f"{rate:.0f} msg/s > loadBalancerNamespaceBundleMaxMsgRate"
        if throughput > c.loadBalancerNamespaceBundleMaxBandwidthMbytes * 1024 * 1024:
            return f"{throughput / 1048576:.1f} MB/s > loadBalancerNamespaceBundleMaxBandwidthMbytes"
        return None

    async def split_hot_bundles(self) -> list:
        """Split this broker's bundles over a limit (see the module doc); the halves split."""
        report = self.last_report or self.current_report()
        done = []
        for bundle in list(self.ownership.owned.values()):
            reason = self._split_reason((report.get("lastStats") or {}).get(str(bundle)) or {})
            if reason is None:
                continue
            hashes = [topic_hash(name) for name in self.broker.topics]
            try:
                point = splits.split_point(bundle, self.config.defaultNamespaceBundleSplitAlgorithm, hashes)
                halves = await splits.split_bundle(self.ownership, self.ownership.namespaces, bundle, point,
                                                   self.config.loadBalancerNamespaceMaximumBundles)
            except (splits.SplitRefused, ValueError) as e:
                log.info("bundle {bundle} not split: {error}", bundle=str(bundle), error=e)
                continue
            except MetadataStoreError as e:
                log.warn("bundle {bundle} split failed: {error}", bundle=str(bundle), error=e)
                continue
            self._record("split", bundle, f"automatic split: {reason}")
            done.append(halves)
            if self.config.loadBalancerAutoUnloadSplitBundlesEnabled:
                for half in halves:
                    await self.ownership.release(half)
                    self._record("unload", half, "automatic split: halves unloaded to be placed anew")
                # The leader places the halves as their clients look them up again: its view of
                # this broker must no longer count the split bundle's load here (the report
                # would otherwise wait for the next round, and the halves all go elsewhere).
                await self.write_report(force=True)
        return done

    # ---------------------------------------------------------------- the leader's work
    async def lead(self) -> None:
        reports = await self.read_reports()
        before = set(self.aggregator.data)
        self.aggregator.update(reports)
        for gone in before - set(self.aggregator.data):     # split, or no broker serves it now
            await self.store.delete(bundle_data_path(gone)).addErrback(lambda f: None)
        now = self.clock.seconds()
        c = self.config
        if self._last_bundle_data is None or (
                now - self._last_bundle_data >= 60.0 * c.loadBalancerResourceQuotaUpdateIntervalMinutes):
            self._last_bundle_data = now
            for bundle, data in list(self.aggregator.data.items()):
                await self.store.put(bundle_data_path(bundle), json.dumps(data, sort_keys=True).encode())
        if not (c.loadBalancerEnabled and c.loadBalancerSheddingEnabled):
            return
        if self._last_shed is None:
            # The first round only after a whole interval as leader (Pulsar's initial delay):
            # the reports of every broker have come in by then.
            self._last_shed = now
            return
        if now - self._last_shed < 60.0 * c.loadBalancerSheddingIntervalMinutes:
            return
        self._last_shed = now
        await self.shed(reports, now)

    async def shed(self, reports: dict, now: float) -> list:
        """Run the ThresholdShedder over ``reports`` and unload what it picks."""
        picked = self.shedder.find(reports, now)
        for broker, name, reason in picked:
            bundle = splits.parse_range(name.rsplit("/", 1)[0], name.rsplit("/", 1)[1])
            self.shedder.unloaded(name, now)
            self.preallocated.pop(name, None)     # placed anew, not sent back where it was
            self._taken.discard(name)
            self._record("shed", bundle, f"ThresholdShedder on {broker}: {reason}", source=broker)
            try:
                await self.ownership.request_unload(bundle)
            except MetadataStoreError as e:
                log.warn("shedding {bundle} failed: {error}", bundle=name, error=e)
        return picked

    def _record(self, kind, bundle, reason, **details):
        if self.decisions is not None:
            self.decisions.record(kind, str(bundle), reason, broker=self.broker_id, **details)

"""
The nemesis: one fault at a time on a running ``Cluster``, chosen by a seeded ``random.Random``,
for a given duration, then ``heal()`` (every process running and thawed, registered again).

Faults (``KINDS``):

- ``kill-bookie`` / ``kill-broker``: kill -9, down for 1-6 s, start again on the same data and ports.
- ``pause-bookie`` / ``pause-broker``: SIGSTOP until ZooKeeper has expired the process's session
  (seen as its ephemeral registration vanishing or changing hands), 0.5-3 s more, then SIGCONT. The
  process resumes believing it still holds its ephemeral nodes: the case session expiry exists for.
- ``partition-bookie`` / ``partition-broker``: only for daemons run in a network namespace of their
  own (``netns.Isolation``): every byte to and from the daemon stops, both ways, while it keeps
  running, until ZooKeeper has expired its session and 0.5-3 s more; then the bytes flow again.
- ``powerloss-bookie`` (``DISK_KINDS``, optional): only for bookies whose journal and ledger dirs are
  on a lazyfs disk (``bookie.disk``, a ``testing.lazyfs.LazyFSMount``): the disk dies inside one of
  its next 1-300 writes, dropping every write not fsynced, the bookie is killed -9, the disk is
  mounted again (what was durable), and after 1-6 s the bookie starts on it.

- ``kill-zookeeper`` (``ZK_KINDS``, optional): kill -9 the ZooKeeper server, down for 1-6 s, then
  start it again on the same data directory and port. The sessions it had are restored from its log
  with their timeouts restarted, so every daemon that reconnects in time keeps its session (and its
  ephemeral nodes); what the daemons see is a disconnection of a few seconds.
- ``pause-zookeeper`` (``ZK_KINDS``, optional): SIGSTOP the ZooKeeper server for the session
  timeout, one tick (ZooKeeper expires sessions at tick boundaries, so up to a tick late) and
  0.5-3 s more, then SIGCONT. On resuming, ZooKeeper expires every session it has not heard from
  within its timeout, which is all of them: every broker and bookie loses its session (ownerships,
  registrations) at the same moment. The note names the daemons whose registration was then seen
  under a new session (expired and registered again), those still under the old one, and those
  with none.
  Both ZooKeeper kinds only when the harness started the server (``zk_server.owned``: launched by
  ``scripts/zookeeper.sh``); with an external one (``PULSAR_TEST_ZK``, ``--zk``) they are dropped.

- ``unload-bundle`` / ``split-bundle`` (``BUNDLE_KINDS``, issue 15): through the admin API of a
  broker picked by the seed (which forwards or redirects to the owner), one bundle of the namespace
  ``namespace`` (default ``public/default``) is unloaded, or split in two (the halves unloaded or
  not, by the seed); ``hold`` seconds pass before the next fault as after any other.

- ``kill-proxy`` (``PROXY_KINDS``, optional): kill -9 the run's Pulsar proxy, down for 1-6 s, start
  it again on the same port. Every client connection through it (lookups and the relayed producer
  and consumer connections alike) drops at once, while every broker stays up: what the clients
  then see is the proxy's recovery, not the brokers'. Only when the cluster has a proxy
  (``cluster.proxies``); else dropped.

- ``kill-remote`` / ``pause-remote`` (``REMOTE_KINDS``, optional): the remote cluster of a
  ``--replicate`` run (a standalone the cluster's replicators publish to) killed -9, down for
  1-6 s and started again on its data and ports, or SIGSTOPped for a session timeout and 0.5-3 s
  more (it has no session in the cluster's ZooKeeper to wait on), then SIGCONT. Only when the
  run has a remote (``remote``); else dropped.

- ``pause-s3`` (``OFFLOAD_KINDS``, optional): the S3 server of an ``--offload`` run (``s3``, the
  tiered storage every broker offloads to) SIGSTOPped for a session timeout and 0.5-3 s more, then
  SIGCONT: copies and reads of offloaded ledgers hang meanwhile (connections accepted, never
  answered). Never killed: the server keeps its objects in memory, and losing them is not a fault
  an object store's users must survive. Only when the run has one; else dropped.

- ``kill-broker-offloading`` (``OFFLOAD_KINDS``, optional): two faults at once, so that a broker
  dies in the middle of a copy: the S3 server is SIGSTOPped, and 1-2 s later (offloads in flight
  now hang half-way) a broker is killed -9; it starts again after the hold, and only then does the
  S3 server answer again. Only with an S3 server; else dropped.

Run it on the thread that will outlive the daemons it restarts (the main thread): a cluster child
asks for SIGKILL when the thread that spawned it exits (PR_SET_PDEATHSIG is per thread).

The schedule (kinds, targets, hold times, rests) depends only on the seed; how the cluster reacts
depends on timing, as in any Jepsen run. Every fault is recorded in the History with wall-clock start
and end, so a violation can be lined up with what was happening.
"""

import random
import threading
import time

from pulsar_twisted.testing.chaos.history import Fault, History
from pulsar_twisted.testing.cluster import Cluster, ClusterError, wait_for
from pulsar_twisted.testing.process import StandaloneError

KINDS = ("kill-bookie", "kill-broker", "pause-bookie", "pause-broker")
PARTITION_KINDS = ("partition-bookie", "partition-broker")
DISK_KINDS = ("powerloss-bookie",)
BUNDLE_KINDS = ("unload-bundle", "split-bundle")
ZK_KINDS = ("kill-zookeeper", "pause-zookeeper")
PROXY_KINDS = ("kill-proxy",)
REMOTE_KINDS = ("kill-remote", "pause-remote")
OFFLOAD_KINDS = ("pause-s3", "kill-broker-offloading")
#: What applies to a geo-replication pair of standalones (``chaos.geo``), each one a "broker".
GEO_KINDS = ("kill-broker", "pause-broker", "unload-bundle")


class Nemesis:
    """``run(duration)`` injects faults until ``duration`` seconds have passed (a fault under way
    is finished first, so the run may overstay by one fault); ``stop()`` ends it early."""

    def __init__(self, cluster: Cluster, history: History, seed: int, kinds=KINDS,
                 session_timeout: float = 4.0, rest=(2.0, 5.0), log=print,
                 namespace: str = "public/default", remote=None, s3=None):
        self.cluster = cluster
        self.history = history
        self.rng = random.Random(seed)
        isolated = any(getattr(p, "isolation", None) is not None
                       for p in cluster.bookies + cluster.brokers)
        # Partitions only where a daemon runs in a namespace of its own.
        self.kinds = tuple(k for k in kinds if isolated or not k.startswith("partition"))
        if not any(getattr(b, "disk", None) is not None for b in cluster.bookies):
            self.kinds = tuple(k for k in self.kinds if k not in DISK_KINDS)
        zk = getattr(cluster, "zk_server", None)
        #: The ZooKeeper server the ZooKeeper kinds act on (and ``heal()`` thaws and restarts):
        #: only one the harness started. Someone else's is never touched.
        self.zookeeper = zk if getattr(zk, "owned", False) else None
        #: When (monotonic) ZooKeeper last came back from a fault (see ``heal``).
        self._zookeeper_back = None
        if self.zookeeper is None:
            self.kinds = tuple(k for k in self.kinds if k not in ZK_KINDS)
        #: The proxies the proxy kinds act on (and ``heal()`` starts again): none, no proxy kinds.
        self.proxies = list(getattr(cluster, "proxies", ()))
        if not self.proxies:
            self.kinds = tuple(k for k in self.kinds if k not in PROXY_KINDS)
        #: The remote cluster's standalone the remote kinds act on (and ``heal()`` thaws and
        #: starts again): none, no remote kinds.
        self.remotes = [remote] if remote is not None else []
        if not self.remotes:
            self.kinds = tuple(k for k in self.kinds if k not in REMOTE_KINDS)
        #: The S3 server ``pause-s3`` freezes (and ``heal()`` thaws, never restarts: its objects
        #: live in its memory): none, no offload kinds.
        self.s3s = [s3] if s3 is not None else []
        if not self.s3s:
            self.kinds = tuple(k for k in self.kinds if k not in OFFLOAD_KINDS)
        self.session_timeout = session_timeout
        self.namespace = namespace
        self.rest = rest
        self.log = log
        self._stop = threading.Event()
        self.errors = []

    def stop(self) -> None:
        self._stop.set()

    def _sleep(self, seconds: float) -> bool:
        """Sleep unless stopped; True if stopped."""
        return self._stop.wait(seconds)

    def run(self, duration: float) -> None:
        deadline = time.monotonic() + duration
        if not self.kinds:                # a control run: the same timeline, no faults
            self._sleep(duration)
            return
        if self._sleep(self.rng.uniform(*self.rest)):
            return
        while time.monotonic() < deadline and not self._stop.is_set():
            kind = self.rng.choice(self.kinds)
            group = self.cluster.bookies if kind.endswith("bookie") else self.cluster.brokers
            if kind in ZK_KINDS:
                group = [self.zookeeper]
            if kind in PROXY_KINDS:
                group = self.proxies
            if kind in REMOTE_KINDS:
                group = self.remotes
            if kind == "pause-s3":
                group = self.s3s
            if kind.startswith("partition"):
                group = [p for p in group if getattr(p, "isolation", None) is not None]
                if not group:
                    continue
            if kind in DISK_KINDS:
                group = [p for p in group if getattr(p, "disk", None) is not None]
            target = self.rng.choice(group)
            hold = (self.rng.uniform(1.0, 6.0) if kind.startswith(("kill", "powerloss"))
                    else self.rng.uniform(0.5, 3.0))
            fault = Fault(kind, target.name, time.time())
            self.history.record_fault(fault)
            self.log(f"nemesis: {kind} {target.name} (hold {hold:.1f}s)")
            try:
                if kind in BUNDLE_KINDS:
                    fault.note = self._bundle(kind, target, hold)
                elif kind == "pause-zookeeper":
                    fault.note = self._pause_zookeeper(target, hold)
                elif kind in ("pause-remote", "pause-s3"):
                    fault.note = self._pause_remote(target, hold)
                elif kind == "kill-zookeeper":
                    fault.note = self._kill_zookeeper(target, hold)
                elif kind == "kill-broker-offloading":
                    fault.note = self._kill_offloading(target, hold)
                elif kind.startswith("kill"):
                    self._kill(target, hold)
                elif kind in DISK_KINDS:
                    fault.note = self._power_loss(target, hold)
                elif kind.startswith("pause"):
                    fault.note = self._pause(target, hold)
                else:
                    fault.note = self._partition(target, hold)
            except Exception as e:
                fault.note += f" error: {type(e).__name__}: {str(e)[:300]}"
                self.errors.append(f"{kind} {target.name}: {e}")
                self.log(f"nemesis: {kind} {target.name} failed: {str(e)[:300]}")
                if target in self.s3s:
                    target.resume()
                else:
                    self._heal_one(target)
            fault.ended = time.time()
            if self._sleep(self.rng.uniform(*self.rest)):
                return

    def _kill(self, target, hold: float) -> None:
        target.kill9()
        self._sleep(hold)
        target.start()

    def _kill_zookeeper(self, zookeeper, hold: float) -> str:
        zookeeper.kill9()
        down = time.monotonic()
        self._sleep(hold)
        zookeeper.start()
        self._zookeeper_back = time.monotonic()
        return f"down {time.monotonic() - down:.1f}s"

    def _sessions(self) -> dict:
        """Daemon name -> the session holding its registration (None if none, or unknown)."""
        return {p.name: self.cluster.session_of(p.registration)
                for p in self.cluster.bookies + self.cluster.brokers}

    def _pause_zookeeper(self, zookeeper, hold: float) -> str:
        """Frozen for the session timeout, a tick and ``hold`` more; the note says whose sessions
        were seen to expire (registration under a new session within 4 session timeouts of the
        thaw)."""
        old = self._sessions()
        frozen = self.session_timeout + zookeeper.tick_time + hold
        zookeeper.pause()
        try:
            self._sleep(frozen)
        finally:
            zookeeper.resume()
            self._zookeeper_back = time.monotonic()

        def moved():
            now = self._sessions()
            return {n for n, s in now.items() if s is not None and s != old[n]}
        try:
            wait_for(lambda: moved() >= set(old), self.session_timeout * 4,
                     "every registration under a new session", interval=0.2)
        except ClusterError:
            pass
        now = self._sessions()
        expired = sorted(n for n, s in now.items() if s is not None and s != old[n])
        kept = sorted(n for n, s in now.items() if s is not None and s == old[n])
        gone = sorted(n for n, s in now.items() if s is None)
        return (f"frozen {frozen:.1f}s; new sessions: {', '.join(expired) or 'none'}; "
                f"old sessions: {', '.join(kept) or 'none'}; unregistered: {', '.join(gone) or 'none'}")

    def _bundle(self, kind: str, target, hold: float) -> str:
        """Unload or split one bundle through ``target``'s admin API; the note names it."""
        from pulsar_twisted.cli.admin import AdminClient
        client = AdminClient(target.web_service_url, timeout=30.0)
        path = "/admin/v2/namespaces/" + self.namespace
        bounds = client.get(path)["bundles"]["boundaries"]
        i = self.rng.randrange(len(bounds) - 1)
        bundle = f"{bounds[i]}_{bounds[i + 1]}"
        if kind == "unload-bundle":
            client.put(f"{path}/{bundle}/unload")
            note = f"unloaded {bundle}"
        else:
            unload = self.rng.random() < 0.5
            client.put(f"{path}/{bundle}/split", query={"unload": "true" if unload else "false"})
            note = f"split {bundle}{' and unloaded the halves' if unload else ''}"
        self._sleep(hold)
        return note

    def _power_loss(self, target, hold: float) -> str:
        disk = target.disk
        disk.arm(self.rng.randint(1, 300))
        dropped = disk.wait_cut(10.0) or disk.cut(dead=True)   # a bookie writing nothing: cut now
        target.kill9()
        disk.restart()
        self._sleep(hold)
        target.start()
        return f"dropped {dropped['unsynced_bytes']} unsynced bytes, {dropped['volatile_names']} names"

    def _wait_expired(self, target, old_session) -> bool:
        """Wait (at most 4 session timeouts) until ``target``'s registration is gone or held by
        another session; whether it was."""
        try:
            wait_for(lambda: self.cluster.session_of(target.registration) != old_session,
                     self.session_timeout * 4, f"{target.name}'s session to expire", interval=0.2)
            return True
        except ClusterError:
            return False

    def _pause(self, target, hold: float) -> str:
        old = self.cluster.session_of(target.registration)
        target.pause()
        try:
            expired = self._wait_expired(target, old)
            self._sleep(hold)
        finally:
            target.resume()
        return "session expired" if expired else "session did NOT expire"

    def _pause_remote(self, target, hold: float) -> str:
        """As long as a paused broker of the cluster (whose session lasts ``session_timeout``)
        at least stays frozen; the remote (or the S3 server) has no session here to watch."""
        frozen = self.session_timeout + hold
        target.pause()
        try:
            self._sleep(frozen)
        finally:
            target.resume()
        return f"stopped {frozen:.1f}s"

    def _kill_offloading(self, broker, hold: float) -> str:
        """S3 frozen, then ``broker`` killed -9 while its copies hang; started again, then S3 thawed."""
        s3 = self.s3s[0]
        s3.pause()
        try:
            frozen = self.rng.uniform(1.0, 2.0)
            self._sleep(frozen)
            self._kill(broker, hold)
        finally:
            s3.resume()
        return f"s3 stopped {frozen:.1f}s before the kill"

    def _partition(self, target, hold: float) -> str:
        old = self.cluster.session_of(target.registration)
        target.isolation.cut()
        try:
            expired = self._wait_expired(target, old)
            self._sleep(hold)
        finally:
            target.isolation.heal()
        return "session expired" if expired else "session did NOT expire"

    def _heal_one(self, process) -> None:
        if getattr(process, "isolation", None) is not None:
            process.isolation.heal()
        process.resume()
        disk = getattr(process, "disk", None)
        if disk is not None and (disk.process is None or disk.process.poll() is not None):
            disk.restart()
        if not process.running():
            try:
                process.start()
            except (ClusterError, StandaloneError) as e:
                self.errors.append(f"restart {process.name}: {e}")

    def _settle(self, seconds: float) -> None:
        time.sleep(seconds)

    def heal(self, timeout: float = 60.0) -> None:
        """Every process thawed, connected and running (a proxy too: started again, it accepts
        connections; the S3 server thawed), and every bookie and broker registered in ZooKeeper
        again (ClusterError after ``timeout``). ZooKeeper first, if the nemesis may touch it:
        thawed, and started again if it is down."""
        if self.zookeeper is not None:
            if self.zookeeper.paused or not self.zookeeper.running():
                self._heal_one(self.zookeeper)
                self._zookeeper_back = time.monotonic()
            # A restarted ZooKeeper restores every session from its log and keeps it for a session
            # timeout (and up to a tick more) even if its client never reconnects, so a
            # registration seen sooner proves nothing: wait that out first, so that "registered"
            # means held by a session that is alive.
            if self._zookeeper_back is not None:
                settle = (self._zookeeper_back + self.session_timeout + self.zookeeper.tick_time
                          + 0.5 - time.monotonic())
                if settle > 0:
                    self._settle(settle)
        for s3 in self.s3s:        # first: a broker's offload or tiered read may wait on it
            s3.resume()
        for process in self.cluster.bookies + self.cluster.brokers + self.proxies + self.remotes:
            self._heal_one(process)
        wait_for(lambda: all(self.cluster.session_of(p.registration) is not None
                             for p in self.cluster.bookies + self.cluster.brokers),
                 timeout, "every daemon registered after the heal", interval=0.2,
                 on_timeout=self.cluster.logs)

"""
A Jepsen-style chaos harness for a real cluster (issue 11): ZooKeeper, bookies and brokers as
processes (``pulsar_twisted.testing.cluster``), the official client as the workload, one seeded fault
at a time, then heal, drain and check.

- ``history``: what happened, as plain values (sends and their outcomes, what storage holds, what
  each consumer received, the faults); JSON in and out so a run can be checked again later.
- ``checker``: pure functions over a History: acked, lost, stored twice, order violations, unanswered
  sends, undelivered backlog; the verdict is clean only with none of them.
- ``workload``: named producers publishing sequence-numbered payloads and consumers on the four
  subscription types, all through ``import pulsar``; the read-back of every partition.
- ``nemesis``: the seeded fault schedule (kill -9 and restart, SIGSTOP past session expiry then
  SIGCONT, network partitions) and the heal.
- ``netns`` and ``relay``: partitions. The daemons to partition run in network namespaces of their
  own, joined to the host's 127.0.0.1 only by TCP <-> Unix-socket relays; a cut stops every byte.
- ``geo`` and ``geo_checker``: the same for geo-replication between two standalones
  (``testing.georeplication.GeoPair``): producers on both clusters, the nemesis on either, and
  ``checker.check`` on a view per cluster (lost locally) and per direction (lost in replication,
  stored twice and out of order per original producer); ``scripts/chaos_replication.py``.
- ``replica``: ``--replicate`` of a cluster run: the namespace geo-replicated to a standalone of
  the run's own, set up before the workload; after the read-back the replicators waited for and
  the remote copy checked (``geo_checker.check_direction``).
- ``tiered``: ``--offload`` of a cluster run: every sealed ledger offloaded to an S3 server (moto)
  of the run's own, the ``pause-s3`` fault's target; before the read-back the offloads waited for
  and the bookies' copies deleted, so that old ledgers are read from S3 alone.
- ``runner``: one bounded run end to end, cleaning up every process and namespace it made whatever
  happens (Ctrl-C and SIGTERM included; a SIGKILLed harness still takes its daemons and relays down
  through PR_SET_PDEATHSIG, but leaves its namespaces: ``ip netns list | grep chaos-``).

Runs: ``python scripts/chaos.py --seed 1 --quorum 3/3/2`` (75 s of faults, 7 producers, 280 msg/s;
``--help`` for the rest); ``--proxy`` puts every client behind a Pulsar proxy (and allows the
``kill-proxy`` fault); ``--replicate`` adds the remote copy's check (and allows ``kill-remote``,
``pause-remote``); ``--offload`` offloads to S3 and reads old ledgers back from there (and allows
``pause-s3``); ``--faults ''`` is a fault-free control run; ``--table *.json`` lines up
the verdicts of several runs. ``tests/cluster/test_chaos.py`` holds the checker's unit tests and a
short run for CI.

Blocking code (threads, sleeps with deadlines), like the rest of the process harness: for scripts
and ``SynchronousTestCase``, never inside a reactor.
"""

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
  SIGCONT, network partitions through network namespaces) and the heal.
- ``runner``: one bounded run end to end, cleaning up every process it made whatever happens.

Blocking code (threads, sleeps with deadlines), like the rest of the process harness: for scripts
and ``SynchronousTestCase``, never inside a reactor.
"""

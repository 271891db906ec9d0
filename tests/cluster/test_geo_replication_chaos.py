"""
The geo-replication chaos harness (``pulsar_twisted.testing.chaos.geo``).

``GeoCheckerTests``: the checker on hand-made histories, no processes. ``ShortGeoChaosRunTests``:
one seeded run of 35 s of faults on two real standalones with the official client (about 50 s
with start-up, settling, draining and reading back; its figures are printed); it fails while
either cluster loses, duplicates or reorders a message, locally or in replication, and when some
direction replicated nothing at all (a harness that replicates nothing must not pass).
"""

from twisted.trial.unittest import SynchronousTestCase

from pulsar_twisted.testing.chaos.geo_checker import GeoHistory, check_geo
from pulsar_twisted.testing.chaos.history import Send, Stored

try:
    import pulsar
except ImportError:  # pragma: no cover
    pulsar = None


def _geo() -> GeoHistory:
    return GeoHistory(("east", "west"), sources={"e": "east", "w": "west"}, topics={0: "t"})


def _send(geo, producer, seq, acked=True, ledger=None):
    message_id = (ledger if ledger is not None else 1, seq, -1) if acked else None
    geo.sends.sends[(producer, seq)] = Send(producer, seq, None, 0.0,
                                            "acked" if acked else "failed", message_id, None, 0.1)


def _store(geo, cluster, producer, seq, ledger=1):
    geo.stored[cluster].storage.setdefault(0, []).append(Stored(producer, seq, None, (ledger, seq, -1)))


def _clean(n=3) -> GeoHistory:
    """``n`` messages from each side, acked, stored at the source and replicated in order."""
    geo = _geo()
    for seq in range(n):
        _send(geo, "e", seq)
        _send(geo, "w", seq, ledger=2)
    for seq in range(n):
        _store(geo, "east", "e", seq)
        _store(geo, "west", "w", seq, ledger=2)
    for seq in range(n):
        _store(geo, "west", "e", seq, ledger=3)
        _store(geo, "east", "w", seq, ledger=4)
    return geo


class GeoCheckerTests(SynchronousTestCase):

    def test_clean(self):
        """Everything acked is stored once on both clusters, in order: no violation, and
        both directions crossed."""
        verdict = check_geo(_clean())
        self.assertEqual(verdict.violations, {})
        self.assertEqual(verdict.crossed, {"east->west": 3, "west->east": 3})

    def test_nothing_replicated(self):
        """A run without replication: every acked message is lost in replication and nothing
        crossed."""
        geo = _geo()
        for seq in range(2):
            _send(geo, "e", seq)
            _store(geo, "east", "e", seq)
        verdict = check_geo(geo)
        self.assertEqual(verdict.violations, {"east->west:lost": 2, "east->west:unreplicated": 2})
        self.assertEqual(verdict.crossed, {"east->west": 0, "west->east": 0})

    def test_lost_locally(self):
        """Acked on east, missing on east (and so on west): lost locally, lost in replication."""
        geo = _clean()
        _send(geo, "e", 3)
        verdict = check_geo(geo)
        self.assertEqual(verdict.violations, {"east:lost": 1, "east->west:lost": 1})

    def test_unacked_stored_must_cross(self):
        """A failed send that east stored anyway must still reach west."""
        geo = _clean()
        _send(geo, "e", 3, acked=False)
        _store(geo, "east", "e", 3)
        self.assertEqual(check_geo(geo).violations, {"east->west:unreplicated": 1})

    def test_duplicate_and_order_on_the_remote(self):
        """A replicated copy stored twice, or out of its producer's order, on west."""
        geo = _clean()
        _store(geo, "west", "e", 1, ledger=5)
        self.assertEqual(check_geo(geo).violations, {"east->west:stored_twice": 1})
        geo = _clean()
        west = geo.stored["west"].storage[0]
        first, second = (i for i, e in enumerate(west) if e.producer == "e" and e.seq in (0, 1))
        west[first], west[second] = west[second], west[first]
        self.assertEqual(check_geo(geo).violations, {"east->west:storage_order_violations": 1})

    def test_receipts_are_not_compared_across_clusters(self):
        """East's message ids name east's ledgers: a west entry at the same position is no
        receipt mismatch."""
        geo = _clean()
        # West holds e's copies in a ledger numbered as east's, one entry further on: e's
        # receipt for seq 1 (east 1:1) names west's copy of seq 0.
        west = geo.stored["west"].storage[0]
        west[:] = [Stored(e.producer, e.seq, None, (1, e.seq + 1, -1)) if e.producer == "e" else e
                   for e in west]
        self.assertEqual(check_geo(geo).violations, {})

    def test_json_round_trip(self):
        """A history saved as JSON checks the same once loaded again."""
        geo = _clean()
        _send(geo, "e", 3)
        again = GeoHistory.from_json(geo.to_json())
        self.assertEqual(check_geo(again).violations, check_geo(geo).violations)


class ShortGeoChaosRunTests(SynchronousTestCase):
    if pulsar is None:
        skip = "the official pulsar-client package is not installed"

    def test_short_run(self):
        """35 s of seeded faults on either cluster: nothing lost, stored twice or out of order,
        locally or in replication, and messages crossed both ways."""
        from pulsar_twisted.testing.chaos.geo import GeoChaosConfig, run_geo
        from pulsar_twisted.testing.chaos.geo_checker import format_geo_verdict
        lines = []
        config = GeoChaosConfig(seed=11, duration=35.0, rate=30.0, batched_rate=30.0,
                                settle=35.0, drain_timeout=45.0, log=lines.append)
        geo, verdict = run_geo(config)
        report = "\n".join(lines + [format_geo_verdict(verdict)])
        print("\n" + report)
        self.assertEqual(verdict.violations, {}, report)
        self.assertTrue(all(verdict.crossed.values()), report)
        for direction, crossed in verdict.crossed.items():
            self.assertGreater(crossed, 0, f"nothing crossed {direction}\n{report}")

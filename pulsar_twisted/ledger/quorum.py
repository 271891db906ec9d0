"""
Replication math of the BookKeeper client, with no I/O (BookKeeper's
``RoundRobinDistributionSchedule`` and ensemble placement policies).

A ledger segment is written to an *ensemble* of ``E`` bookies. Entry ``e`` goes to its *write set*:
the ``Qw`` ensemble positions starting at ``e % E`` (round-robin striping), and it is acknowledged
once ``Qa`` of them have it. Everything here speaks of ensemble *indices* (0..E-1) so that the
handle can swap the bookie at an index during an ensemble change without recomputing anything.
"""

import random as _random
from typing import Iterable, Optional, Sequence

from zope.interface import Interface, implementer

from pulsar_twisted.common.bk_errors import NotEnoughBookiesError


def check_quorums(ensemble_size: int, write_quorum: int, ack_quorum: int) -> None:
    """Raise ValueError unless ``E >= Qw >= Qa >= 1`` (BookKeeper's IncorrectParameter)."""
    if not (ensemble_size >= write_quorum >= ack_quorum >= 1):
        raise ValueError(
            f"need ensemble_size >= write_quorum >= ack_quorum >= 1, got "
            f"E={ensemble_size} Qw={write_quorum} Qa={ack_quorum}")


def write_set(entry_id: int, ensemble_size: int, write_quorum: int) -> tuple:
    """The ensemble indices that store ``entry_id``, in the order readers should try them."""
    first = entry_id % ensemble_size
    return tuple((first + i) % ensemble_size for i in range(write_quorum))


class DistributionSchedule:
    """
    Write sets of one ledger, precomputed: there are only ``E`` distinct ones, so the per-entry
    cost on the add hot path is one modulo and one tuple lookup.
    """

    __slots__ = ("ensemble_size", "write_quorum", "ack_quorum", "_write_sets")

    def __init__(self, ensemble_size: int, write_quorum: int, ack_quorum: int):
        check_quorums(ensemble_size, write_quorum, ack_quorum)
        self.ensemble_size = ensemble_size
        self.write_quorum = write_quorum
        self.ack_quorum = ack_quorum
        self._write_sets = tuple(write_set(i, ensemble_size, write_quorum)
                                 for i in range(ensemble_size))

    def write_set(self, entry_id: int) -> tuple:
        """Ensemble indices storing ``entry_id`` (see :func:`write_set`)."""
        return self._write_sets[entry_id % self.ensemble_size]

    @property
    def max_missing_allowed(self) -> int:
        """
        How many replicas of an acknowledged entry may be missing from its write set: ``Qw - Qa``.
        An entry reported missing by more than this many bookies of its write set can never have
        reached an ack quorum, so a recovering reader may treat it as not written.
        """
        return self.write_quorum - self.ack_quorum

    def covers_ack_quorums(self, responded: Iterable[int]) -> bool:
        """
        True when the bookies at the ``responded`` indices intersect every possible ack quorum:
        i.e. in every write set fewer than ``Qa`` bookies are silent. Recovery needs this much
        before trusting the LAC it learned, because an entry acked by a quorum of silent bookies
        would otherwise be missed (BookKeeper's ``checkCovered``).
        """
        seen = set(responded)
        for ws in self._write_sets:
            silent = sum(1 for index in ws if index not in seen)
            if silent >= self.ack_quorum:
                return False
        return True


class IEnsemblePlacementPolicy(Interface):
    """Chooses the bookies of new ensembles and replacements for failed ones."""

    def new_ensemble(size: int, writable: Iterable[str], exclude: Iterable[str] = ()):
        """A list of ``size`` distinct bookie ids; NotEnoughBookiesError if there are too few."""

    def replace_bookie(ensemble: Sequence[str], index: int, writable: Iterable[str],
                       exclude: Iterable[str] = ()):
        """A bookie id not in ``ensemble`` nor ``exclude`` to take position ``index``;
        NotEnoughBookiesError if there is none."""


@implementer(IEnsemblePlacementPolicy)
class RandomPlacementPolicy:
    """
    Uniform random placement (BookKeeper's default ``RackawarePlacementPolicy`` degrades to this
    when no racks are configured). ``rng`` is injectable so tests are deterministic.
    """

    def __init__(self, rng: Optional[_random.Random] = None):
        self._rng = rng if rng is not None else _random.Random()

    def new_ensemble(self, size, writable, exclude=()):
        excluded = set(exclude)
        candidates = sorted(b for b in set(writable) if b not in excluded)
        if len(candidates) < size:
            raise NotEnoughBookiesError(
                f"need {size} writable bookies, {len(candidates)} available")
        return self._rng.sample(candidates, size)

    def replace_bookie(self, ensemble, index, writable, exclude=()):
        excluded = set(exclude) | set(ensemble)
        candidates = sorted(b for b in set(writable) if b not in excluded)
        if not candidates:
            raise NotEnoughBookiesError(
                f"no writable bookie to replace {ensemble[index]!r} at index {index}")
        return self._rng.choice(candidates)

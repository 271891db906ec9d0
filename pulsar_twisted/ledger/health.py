"""
Bookie quarantine (BookKeeper's client health check, Pulsar's ``bookkeeperClientHealthCheck*`` keys).

The client counts, per bookie, the writes that failed or timed out. A bookie with ``error_threshold``
of them within one ``interval`` is quarantined for ``quarantine_time``: new ensembles and ensemble
replacements leave it out, unless nothing else can make up the ensemble (then it is used, as
BookKeeper does, so that a cluster with no spare bookie keeps writing when it can).

BookKeeper counts the errors and quarantines on a timer every interval; here the bookie is
quarantined as soon as its count reaches the threshold within the current interval, so that a
bookie that died but is still registered (its ZooKeeper session has not expired yet) stops being
chosen at once instead of up to one interval later. Time comes from the injected clock.
"""

from typing import Iterable

from twisted.logger import Logger
from zope.interface import implementer

from pulsar_twisted.common.bk_errors import NotEnoughBookiesError
from pulsar_twisted.common.lograte import LogRate
from pulsar_twisted.ledger.quorum import IEnsemblePlacementPolicy

log = Logger()


class BookieHealth:
    """Error counts and quarantines. ``enabled`` False: nothing is ever quarantined. Times in
    seconds (Pulsar's defaults: 60 s interval, 5 errors, 1800 s quarantine)."""

    def __init__(self, clock, *, enabled: bool = True, interval: float = 60.0,
                 error_threshold: int = 5, quarantine_time: float = 1800.0):
        self.clock = clock
        self.enabled = enabled
        self.interval = interval
        self.error_threshold = max(1, int(error_threshold))
        self.quarantine_time = quarantine_time
        self._window_start = clock.seconds()
        self._errors = {}           # bookie_id -> errors in the current interval
        self._until = {}            # bookie_id -> end of its quarantine (clock seconds)

    def record_error(self, bookie_id: str) -> None:
        """A write to ``bookie_id`` failed or timed out."""
        if not self.enabled:
            return
        now = self.clock.seconds()
        if self.interval > 0 and now - self._window_start >= self.interval:
            self._window_start = now
            self._errors.clear()
        count = self._errors.get(bookie_id, 0) + 1
        self._errors[bookie_id] = count
        if count >= self.error_threshold and not self.is_quarantined(bookie_id):
            self._until[bookie_id] = now + self.quarantine_time
            self._errors.pop(bookie_id, None)
            log.warn("bookie {bookie} quarantined for {seconds:.0f} s after {n} failed writes",
                     bookie=bookie_id, seconds=self.quarantine_time, n=count)

    def is_quarantined(self, bookie_id: str) -> bool:
        until = self._until.get(bookie_id)
        if until is None:
            return False
        if self.clock.seconds() >= until:
            del self._until[bookie_id]
            log.info("bookie {bookie} leaves quarantine", bookie=bookie_id)
            return False
        return True

    def quarantined(self) -> frozenset:
        """The bookies quarantined now."""
        if not self._until:
            return _NONE      # the usual case, asked on every ledger creation
        return frozenset(b for b in list(self._until) if self.is_quarantined(b))


_NONE = frozenset()


@implementer(IEnsemblePlacementPolicy)
class QuarantineAwarePlacement:
    """Wraps a placement policy: quarantined bookies are tried last (only if the others cannot make
    up the ensemble or the replacement)."""

    def __init__(self, inner, health: BookieHealth):
        self.inner = inner
        self.health = health
        self._fallback_log = LogRate(health.clock)

    def _split(self, writable: Iterable[str]):
        quarantined = self.health.quarantined()
        if not quarantined:
            return writable, quarantined
        writable = set(writable)
        quarantined = quarantined & writable
        return writable - quarantined, quarantined

    def new_ensemble(self, size, writable, exclude=()):
        healthy, quarantined = self._split(writable)
        try:
            return self.inner.new_ensemble(size, healthy, exclude)
        except NotEnoughBookiesError:
            if not quarantined:
                raise
        count = self._fallback_log.due()
        if count is not None:
            log.warn("placement: not enough healthy bookies for an ensemble of {size}: using "
                     "quarantined ones {q} ({count} times since the last line)", size=size,
                     q=sorted(quarantined), count=count)
        return self.inner.new_ensemble(size, healthy | quarantined, exclude)

    def replace_bookie(self, ensemble, index, writable, exclude=()):
        healthy, quarantined = self._split(writable)
        try:
            return self.inner.replace_bookie(ensemble, index, healthy, exclude)
        except NotEnoughBookiesError:
            if not quarantined:
                raise
        count = self._fallback_log.due()
        if count is not None:
            log.warn("placement: no healthy bookie to replace {bookie}: trying quarantined ones {q} "
                     "({count} fallbacks since the last line)", bookie=ensemble[index],
                     q=sorted(quarantined), count=count)
        return self.inner.replace_bookie(ensemble, index, healthy | quarantined, exclude)

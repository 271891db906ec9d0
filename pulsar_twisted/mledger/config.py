"""
Configuration of one managed ledger (Pulsar's ``ManagedLedgerConfig``).

Field names follow Pulsar's ``managedLedger*`` broker keys so that the broker can map its
configuration onto this class one key at a time.
"""

from dataclasses import dataclass


@dataclass
class ManagedLedgerConfig:
    """
    Settings of a managed ledger and its cursors.

    Retention follows Pulsar exactly: a fully consumed ledger is deleted once it is past the
    time limit OR the stored size is over the size limit; ``-1`` means unlimited for either.
    So 0/0 (Pulsar's default) deletes consumed ledgers at once, and keeping data for a time
    only needs ``retention_size_mb=-1`` (or a size big enough).
    """

    ensemble_size: int = 1
    """Bookies each ledger is striped over (managedLedgerDefaultEnsembleSize)."""
    write_quorum: int = 1
    """Copies of each entry (managedLedgerDefaultWriteQuorum)."""
    ack_quorum: int = 1
    """Acks before an add is durable (managedLedgerDefaultAckQuorum)."""
    max_entries_per_ledger: int = 50000
    """Roll the current ledger after this many entries (managedLedgerMaxEntriesPerLedger)."""
    min_rollover_time_ms: int = 10_000
    """A ledger is never rolled by size before it is this old (managedLedgerMinLedgerRolloverTimeMinutes)."""
    max_rollover_time_ms: int = 4 * 3600 * 1000
    """A non-empty ledger is rolled once it is this old (managedLedgerMaxLedgerRolloverTimeMinutes)."""
    retention_time_ms: int = 0
    """Keep consumed ledgers this long; -1 forever (defaultRetentionTimeInMinutes)."""
    retention_size_mb: int = 0
    """Keep consumed ledgers while the total is under this size; -1 unlimited (defaultRetentionSizeInMB)."""
    cursor_max_entries_per_ledger: int = 50000
    """Roll a cursor's ledger after this many snapshots (managedLedgerCursorMaxEntriesPerLedger)."""
    max_unacked_ranges_to_persist: int = 1000
    """Individually acked ranges kept in a snapshot; the rest are redelivered after a restart
    (managedLedgerMaxUnackedRangesToPersist)."""
    cache_size_bytes: int = 64 * 1024 * 1024
    """Bound of this ledger's entry cache (managedLedgerCacheSizeMB, per ledger here)."""
    password: bytes = b""
    """Ledger password (managedLedgerDigestType/password)."""
    max_pending_adds: int = 10_000
    """Adds in flight above which throttle listeners are told to pause producers."""
    offloader: object = None
    """The namespace's ``offload.offloader.LedgerOffloader``; None: no tiered storage
    (managedLedgerOffloadDriver unset)."""
    offload_threshold_bytes: int = -1
    """Offload the oldest sealed ledgers once the ledgers after them hold more than this;
    0 every sealed ledger, < 0 never by size (managedLedgerOffloadThresholdInBytes)."""
    offload_threshold_seconds: int = -1
    """Offload sealed ledgers closed longer ago than this; < 0 never by age
    (managedLedgerOffloadThresholdInSeconds)."""
    offload_deletion_lag_ms: int = 4 * 3600 * 1000
    """Delete an offloaded ledger from the bookies this long after its offload; < 0 never
    (managedLedgerOffloadDeletionLagMs)."""
    offload_read_tiered_first: bool = True
    """Read an offloaded ledger from tiered storage even while the bookies still have it
    (managedLedgerDataReadPriority=tiered-storage-first)."""

    @classmethod
    def from_config(cls, config) -> "ManagedLedgerConfig":
        """The broker's ``managedLedger*`` and default retention keys (a ``BrokerConfig`` or
        ``StandaloneConfig``) as the default configuration of its managed ledgers."""
        return cls(
            ensemble_size=config.managedLedgerDefaultEnsembleSize,
            write_quorum=config.managedLedgerDefaultWriteQuorum,
            ack_quorum=config.managedLedgerDefaultAckQuorum,
            max_entries_per_ledger=config.managedLedgerMaxEntriesPerLedger,
            min_rollover_time_ms=config.managedLedgerMinLedgerRolloverTimeMinutes * 60_000,
            max_rollover_time_ms=config.managedLedgerMaxLedgerRolloverTimeMinutes * 60_000,
            # -1 means "forever" for both retention limits, as in Pulsar.
            retention_time_ms=(config.defaultRetentionTimeInMinutes * 60_000
                               if config.defaultRetentionTimeInMinutes >= 0 else -1),
            retention_size_mb=config.defaultRetentionSizeInMB,
            cursor_max_entries_per_ledger=config.managedLedgerCursorMaxEntriesPerLedger,
            max_unacked_ranges_to_persist=config.managedLedgerMaxUnackedRangesToPersist,
            cache_size_bytes=config.managedLedgerCacheSizeMB * 1024 * 1024)

    def __post_init__(self):
        if not 1 <= self.ack_quorum <= self.write_quorum <= self.ensemble_size:
            raise ValueError("need 1 <= ack_quorum <= write_quorum <= ensemble_size")
        if self.max_entries_per_ledger < 1 or self.cursor_max_entries_per_ledger < 1:
            raise ValueError("max entries per ledger must be >= 1")

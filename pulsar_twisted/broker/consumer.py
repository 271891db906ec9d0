"""A consumer attached to a subscription, as the broker sees it: permits, unacked messages, stats."""

from twisted.internet import defer

from pulsar_twisted.broker.rates import RateMeter
from pulsar_twisted.common import errors
from pulsar_twisted.proto import PulsarApi_pb2 as api

SUB_TYPE_NAMES = {api.CommandSubscribe.Exclusive: "Exclusive", api.CommandSubscribe.Shared: "Shared",
                  api.CommandSubscribe.Failover: "Failover", api.CommandSubscribe.Key_Shared: "Key_Shared"}


class Consumer:
    """
    One consumer of one connection. ``permits`` is the number of messages the client can still
    take (FLOW adds to it, every dispatched message takes one, a batch takes as many as it holds).
    ``pending`` maps the positions sent and not yet acked to their message counts (kept for the
    subscription types that redeliver per consumer).
    """

    def __init__(self, subscription, cnx, consumer_id: int, name: str, sub_type: int,
                 priority_level: int = 0, partition: int = -1, metadata=None, key_shared_meta=None,
                 max_unacked: int = 0):
        self.subscription = subscription
        self.cnx = cnx
        self.consumer_id = consumer_id
        self.name = name
        self.sub_type = sub_type
        self.priority_level = priority_level
        self.partition = partition
        self.metadata = dict(metadata or {})
        self.key_shared_meta = key_shared_meta
        self.max_unacked = max_unacked
        self.permits = 0
        self.pending = {}
        self.unacked = 0
        self.blocked = False
        self.msg_out = 0
        self.bytes_out = 0
        self.msg_redelivered = 0
        #: Rates of (msg_out, bytes_out, msg_redelivered) over the last stats period.
        self.rates = RateMeter(3)
        self.acks = 0
        self.connected_since = ""
        self.closed = False

    @property
    def sender(self):
        return self.cnx.sender

    def available(self) -> bool:
        """Can take a message now: permits left, not blocked on unacked, connection writable."""
        return self.permits > 0 and not self.blocked and self.cnx.writable and not self.closed

    def flow(self, permits: int) -> None:
        self.permits += permits
        self.subscription.consumer_flow(self)

    def sent(self, position, count: int, size: int, track: bool) -> None:
        """Account for one dispatched entry of ``count`` messages."""
        self.permits -= count
        self.msg_out += count
        self.bytes_out += size
        # The subscription's counts outlive this consumer (Pulsar's msgOutFromRemovedConsumers).
        subscription = self.subscription
        subscription.msg_out += count
        subscription.bytes_out += size
        if track:
            self.pending[position] = count
            self.unacked += count
            if self.max_unacked and self.unacked >= self.max_unacked:
                self.blocked = True

    def acked(self, position) -> bool:
        """Forget a pending position; True if it was this consumer's."""
        count = self.pending.pop(position, None)
        if count is None:
            return False
        self.unacked -= count
        if self.blocked and self.unacked <= self.max_unacked // 2:
            self.blocked = False
        return True

    def take_pending(self, positions=None):
        """Remove and return pending positions (all, or those in ``positions``) for redelivery."""
        if positions is None:
            taken = list(self.pending)
            self.pending.clear()
            self.unacked = 0
        else:
            taken = [p for p in positions if p in self.pending]
            for p in taken:
                self.unacked -= self.pending.pop(p)
        if self.blocked and self.unacked <= self.max_unacked // 2:
            self.blocked = False
        return taken

    def acknowledge(self, cumulative: bool, positions, message_ids):
        if cumulative and self.sub_type in (api.CommandSubscribe.Shared, api.CommandSubscribe.Key_Shared):
            return defer.fail(errors.NotAllowedError(
                f"Cumulative ack is not allowed for {SUB_TYPE_NAMES[self.sub_type]} subscription"))
        self.acks += len(positions)
        batch_acks = self.subscription.batch_acks
        if batch_acks is not None and message_ids:
            # Acks of single messages inside batches (batch_acks module docstring).
            positions = batch_acks.filter_acks(positions, message_ids, cumulative)
        return self.subscription.acknowledge(self, cumulative, positions)

    def redeliver(self, positions=None) -> None:
        # Counted as Pulsar's msgRateRedeliver: the messages this consumer held unacked and gave
        # back (Shared types; single-active consumers hold none, so count none).
        before = self.unacked
        self.subscription.redeliver(self, positions)
        self.msg_redelivered += max(0, before - self.unacked)

    def sample_rates(self, period) -> None:
        self.rates.sample(period, self.msg_out, self.bytes_out, self.msg_redelivered)

    def close_by_broker(self) -> None:
        self.closed = True
        self.cnx.consumer_closed_by_broker(self)

    def stats(self) -> dict:
        """Fields of CONSUMER_STATS_RESPONSE."""
        rate_out, throughput_out, rate_redeliver = self.rates.rates
        return dict(msgRateOut=rate_out, msgThroughputOut=throughput_out,
                    msgRateRedeliver=rate_redeliver,
                    consumerName=self.name, availablePermits=max(self.permits, 0),
                    unackedMessages=self.unacked, blockedConsumerOnUnackedMsgs=self.blocked,
                    address=self.cnx.peer, connectedSince=self.connected_since,
                    type=SUB_TYPE_NAMES.get(self.sub_type, "Exclusive"),
                    msgRateExpired=self.subscription.expired_rate(),
                    msgBacklog=self.subscription.backlog())

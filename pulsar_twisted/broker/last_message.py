"""
The last message id a persistent topic answers (GET_LAST_MESSAGE_ID, the admin API's
``lastMessageId``): its last entry that is not a marker, with the index of the last message of a
batch. Markers (replicated_subscriptions.py) are never delivered, so a reader asking whether a
message is available must not be told of one it will never get (Pulsar's last dispatchable
position).
"""

import weakref

from twisted.internet import defer
from twisted.logger import Logger

from pulsar_twisted.broker.entryinfo import num_messages
from pulsar_twisted.common.position import Position
from pulsar_twisted.proto import PulsarApi_pb2 as api
from pulsar_twisted.wire.frames import entry_metadata

log = Logger()


@defer.inlineCallbacks
def last_message_id(topic):
    """``(ledger_id, entry_id, batch_index)`` of ``topic``'s last message (entry_id -1 when it
    has none)."""
    ledger = topic.ledger
    last = ledger.last_confirmed_entry()
    batch_index = -1
    if last.entry_id >= 0:
        entries = yield ledger.read_entries(last, 1)
        if entries:
            metadata = entry_metadata(entries[0].data)
            if metadata.HasField("marker_type"):
                last, metadata = yield last_before_markers(topic, last)
            count = num_messages(metadata)
            if count > 1:
                batch_index = count - 1
    return (last.ledger_id, last.entry_id, batch_index)


#: Entries read back at most looking for the last message before markers at the end.
LAST_MESSAGE_SCAN = 2000


#: topic -> (the last entry when it was last scanned, its answer then): a later scan stops
#: where that one began, so readers polling a caught-up topic whose tail is markers read only
#: what came since (Pulsar caches its last dispatchable position too).
_scanned = weakref.WeakKeyDictionary()


@defer.inlineCallbacks
def last_before_markers(topic, last):
    answer = _scanned.get(topic)
    if answer is not None and answer[0] == last:
        return answer[1]
    found = yield _scan(topic, last, answer[0] if answer is not None else None,
                        answer[1] if answer is not None else None)
    _scanned[topic] = (last, found)
    return found


@defer.inlineCallbacks
def _scan(topic, last, scanned_to, scanned_answer):
    """``(position, metadata)`` of the last entry of ``topic`` before ``last`` (a marker) that is
    not a marker; ``(Position(ledger, -1), empty metadata)`` when there is none (an empty topic's
    answer); past ``LAST_MESSAGE_SCAN`` entries of markers, ``last`` itself, with a warning."""
    ledger = topic.ledger
    scanned = 0
    step = 1        # entries read at a time, doubling to 32 (a data entry may be megabytes)
    for info in reversed(ledger.ledgers_info()):
        lid = info["ledgerId"]
        if lid > last.ledger_id:
            continue
        top = info["entries"] - 1 if lid < last.ledger_id else last.entry_id - 1
        while top >= 0:
            first = max(0, top - step + 1)
            step = min(32, step * 2)
            entries = yield ledger.read_entries(Position(lid, first), top - first + 1)
            for entry in reversed([e for e in entries if e.position[0] == lid]):
                if scanned_to is not None and entry.position <= scanned_to:
                    return scanned_answer   # markers only since the last scan
                metadata = entry_metadata(entry.data)
                if not metadata.HasField("marker_type"):
                    return (Position(*entry.position), metadata)
            scanned += top - first + 1
            if scanned >= LAST_MESSAGE_SCAN:
                log.warn("{topic}: the last {n} entries are all markers; the last entry is "
                         "answered as the last message", topic=topic.name, n=scanned)
                entries = yield ledger.read_entries(last, 1)
                return (last, entry_metadata(entries[0].data))
            top = first - 1
    return (Position(last.ledger_id, -1), api.MessageMetadata())

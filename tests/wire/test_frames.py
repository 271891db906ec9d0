"""Frame codec: round trips, checksums, limits and malformed input."""

import struct

from hypothesis import given, settings, strategies as st
from twisted.trial import unittest

from pulsar_twisted.proto import PulsarApi_pb2 as api
from pulsar_twisted.wire import frames

T = api.BaseCommand


def _send(producer_id, sequence_id):
    return T(type=T.SEND, send=api.CommandSend(producer_id=producer_id, sequence_id=sequence_id))


def _metadata(**kw):
    kw.setdefault("producer_name", "p")
    kw.setdefault("sequence_id", 0)
    kw.setdefault("publish_time", 1)
    return api.MessageMetadata(**kw)


class FrameRoundTripTests(unittest.SynchronousTestCase):
    @settings(max_examples=200, deadline=None)
    @given(st.integers(0, 2**64 - 1), st.integers(0, 2**64 - 1), st.binary(max_size=2048),
           st.text(max_size=20), st.lists(st.integers(1, 60), max_size=8))
    def test_payload_frames_round_trip(self, producer_id, sequence_id, payload, key, cuts):
        """A payload frame split at any points decodes to the same command, metadata and payload."""
        message = frames.encode_message(_metadata(partition_key=key, sequence_id=sequence_id), payload)
        data = frames.encode_payload_command(_send(producer_id, sequence_id), message) * 2
        decoder = frames.FrameDecoder(1 << 20)
        out, offset = [], 0
        for cut in cuts:
            out.extend(decoder.feed(data[offset:offset + cut]))
            offset += cut
        out.extend(decoder.feed(data[offset:]))
        self.assertEqual(len(out), 2)
        for command, got in out:
            self.assertEqual(command.send.producer_id, producer_id)
            self.assertEqual(command.send.sequence_id, sequence_id)
            self.assertEqual(got, message)
            meta, body = frames.split_message(got)
            self.assertEqual(body, payload)
            self.assertEqual(api.MessageMetadata.FromString(meta).partition_key, key)
        self.assertEqual(decoder.buffered(), 0)

    @given(st.integers(0, 2**64 - 1))
    def test_simple_frames_round_trip(self, request_id):
        """A simple frame carries no message part."""
        command = T(type=T.SUCCESS, success=api.CommandSuccess(request_id=request_id))
        [(decoded, message)] = frames.FrameDecoder(1024).feed(frames.encode_command(command))
        self.assertEqual(decoded, command)
        self.assertIsNone(message)

    def test_fixed_vector(self):
        """PING is the 13-byte frame Pulsar clients send: sizes 9 and 5, then 08 12 92 01 00."""
        data = frames.encode_command(T(type=T.PING, ping=api.CommandPing()))
        self.assertEqual(data, bytes.fromhex("00000009000000050812920100"))

    def test_message_layout(self):
        """The message part is magic 0x0e01, CRC32C of the rest, metadata size, metadata, payload."""
        meta = _metadata()
        message = frames.encode_message(meta, b"xyz")
        magic, crc = struct.unpack(">HI", message[:6])
        self.assertEqual(magic, 0x0E01)
        self.assertEqual(crc, frames.crc32c(message[6:]))
        size = struct.unpack(">I", message[6:10])[0]
        self.assertEqual(message[10:10 + size], meta.SerializeToString())
        self.assertEqual(message[10 + size:], b"xyz")


class FrameErrorTests(unittest.SynchronousTestCase):
    def test_checksum_mismatch(self):
        """A flipped payload bit fails verification."""
        message = bytearray(frames.encode_message(_metadata(), b"payload"))
        message[-1] ^= 1
        self.assertRaises(frames.ChecksumMismatch, frames.verify_message, bytes(message))
        self.assertRaises(frames.ChecksumMismatch, frames.split_message, bytes(message))

    def test_too_long_frame_refused_before_buffering(self):
        """A header announcing more than the limit raises at once, with both sizes."""
        decoder = frames.FrameDecoder(1000)
        e = self.assertRaises(frames.TooLongFrame, decoder.feed, struct.pack(">I", 1001))
        self.assertEqual((e.size, e.limit), (1001, 1000))

    def test_command_size_larger_than_frame(self):
        decoder = frames.FrameDecoder(1000)
        self.assertRaises(frames.FrameError, decoder.feed, struct.pack(">II", 8, 50) + b"x" * 4)

    def test_garbage_command(self):
        decoder = frames.FrameDecoder(1000)
        self.assertRaises(frames.FrameError, decoder.feed, struct.pack(">II", 7, 3) + b"\xff\xff\xff")

    def test_zero_command_size(self):
        self.assertRaises(frames.FrameError, frames.FrameDecoder(100).feed, struct.pack(">II", 4, 0))

    @settings(max_examples=300, deadline=None)
    @given(st.binary(max_size=200))
    def test_random_bytes_never_crash(self, data):
        """Arbitrary input either decodes or raises FrameError, nothing else."""
        try:
            frames.FrameDecoder(1 << 16).feed(data)
        except frames.FrameError:
            pass

    def test_metadata_size_beyond_message(self):
        message = struct.pack(">HI", 0x0E01, 0) + struct.pack(">I", 99) + b"ab"
        self.assertRaises(frames.FrameError, frames.split_message, message, False)


def _broker_entry_metadata(message: bytes, index: int = 7) -> bytes:
    """``message`` behind a broker-entry-metadata block, as a broker with that feature stores it."""
    raw = api.BrokerEntryMetadata(broker_timestamp=5, index=index).SerializeToString()
    return struct.pack(">HI", frames.MAGIC_BROKER_ENTRY_METADATA, len(raw)) + raw + message


class MetadataParserTests(unittest.SynchronousTestCase):
    """entry_metadata is the one reader of a message part's metadata; parse_metadata and
    split_message agree with it."""

    @settings(max_examples=100, deadline=None)
    @given(st.text(max_size=20), st.integers(0, 2**63), st.binary(max_size=300), st.booleans(),
           st.booleans())
    def test_all_readers_agree(self, key, sequence_id, payload, with_entry_metadata, old_format):
        """Checksummed, pre-checksum and broker-entry-prefixed parts all give the same metadata."""
        metadata = _metadata(partition_key=key, sequence_id=sequence_id)
        message = frames.encode_message(metadata, payload)
        if old_format:
            message = message[6:]
        if with_entry_metadata:
            message = _broker_entry_metadata(message)
        self.assertEqual(frames.entry_metadata(message), metadata)
        self.assertEqual(frames.parse_metadata(message, verify=True), metadata)
        self.assertEqual(frames.split_message(message), (metadata.SerializeToString(), payload))

    @settings(max_examples=300, deadline=None)
    @given(st.binary(max_size=120), st.data())
    def test_malformed_parts_are_frame_errors(self, junk, data):
        """Any truncation or corruption of a part is FrameError (never struct or protobuf errors)."""
        message = frames.encode_message(_metadata(partition_key="k"), b"payload")
        choice = data.draw(st.sampled_from(["junk", "cut", "prefixed-cut", "flip"]))
        if choice == "junk":
            bad = junk
        elif choice == "cut":
            bad = message[:data.draw(st.integers(0, len(message) - 1))]
        elif choice == "prefixed-cut":
            full = _broker_entry_metadata(message)
            bad = full[:data.draw(st.integers(0, len(full) - 1))]
        else:
            position = data.draw(st.integers(0, len(message) * 8 - 1))
            bad = bytearray(message)
            bad[position // 8] ^= 1 << (position % 8)
            bad = bytes(bad)
        for reader in (frames.entry_metadata, frames.parse_metadata):
            try:
                reader(bad)
            except frames.FrameError:
                pass

    def test_short_and_oversized(self):
        """Fixed cases: empty, a lone magic, a size past the end, a bad protobuf."""
        good = frames.encode_message(_metadata(), b"p")
        for bad in (b"", b"\x0e", b"\x0e\x02\x00", b"\x0e\x01\x00\x00\x00\x00\x00",
                    good[:6] + struct.pack(">I", 999) + good[10:],
                    struct.pack(">I", 3) + b"\xff\xff\xff"):
            self.assertRaises(frames.FrameError, frames.entry_metadata, bad)

    def test_checksum_only_with_verify(self):
        """entry_metadata does not check the CRC (the broker forwards it); parse_metadata(verify=True)
        does."""
        message = bytearray(frames.encode_message(_metadata(), b"payload"))
        message[-1] ^= 0xFF
        self.assertEqual(frames.entry_metadata(bytes(message)).producer_name, "p")
        self.assertRaises(frames.ChecksumMismatch, frames.parse_metadata, bytes(message), True)


def _protobuf_receipt(producer_id, sequence_id, highest, ledger_id, entry_id):
    mask = 0xFFFFFFFFFFFFFFFF
    return frames.encode_command(api.BaseCommand(
        type=api.BaseCommand.SEND_RECEIPT, send_receipt=api.CommandSendReceipt(
            producer_id=producer_id, sequence_id=sequence_id, highest_sequence_id=highest,
            message_id=api.MessageIdData(ledgerId=ledger_id & mask, entryId=entry_id & mask))))


_u64 = st.one_of(st.integers(0, 300), st.integers(16000, 17000), st.integers(0, 2 ** 64 - 1))


class SendReceiptEncodingTests(unittest.SynchronousTestCase):
    """``encode_send_receipt`` writes the very bytes protobuf serialises (it is built by hand)."""

    @settings(max_examples=100, deadline=None)
    @given(_u64, _u64, _u64, st.one_of(_u64, st.just(-1)), st.one_of(_u64, st.just(-1)))
    def test_same_bytes_as_protobuf(self, producer_id, sequence_id, highest, ledger_id, entry_id):
        self.assertEqual(frames.encode_send_receipt(producer_id, sequence_id, highest, ledger_id, entry_id),
                         _protobuf_receipt(producer_id, sequence_id, highest, ledger_id, entry_id))

    def test_same_bytes_at_the_varint_boundaries(self):
        """Ids at each varint length boundary (table, two-table branch, loop), equal ids or not."""
        edges = [0, 127, 128, 0x3FFF, 0x4000, 0x1FFFFF, 0x200000, 2 ** 28 - 1, 2 ** 28, 2 ** 64 - 1]
        for a in edges:
            for b in edges:
                for args in [(a, b, b, a, b), (b, a, b, b, a), (a, a, a, -1, -1)]:
                    self.assertEqual(frames.encode_send_receipt(*args), _protobuf_receipt(*args), args)

    def test_decodes_as_a_receipt(self):
        [(command, message)] = frames.FrameDecoder(1 << 20).feed(
            frames.encode_send_receipt(7, 2 ** 40, 2 ** 40 + 3, -1, -1))
        self.assertIsNone(message)
        self.assertEqual(command.type, api.BaseCommand.SEND_RECEIPT)
        receipt = command.send_receipt
        self.assertEqual((receipt.producer_id, receipt.sequence_id, receipt.highest_sequence_id),
                         (7, 2 ** 40, 2 ** 40 + 3))
        self.assertEqual((receipt.message_id.ledgerId, receipt.message_id.entryId), (2 ** 64 - 1, 2 ** 64 - 1))

    def test_ids_outside_uint64_refused_as_protobuf_does(self):
        for bad in [(-1, 0, 0, 0, 0), (0, 2 ** 64, 0, 0, 0), (0, 0, -5, 0, 0)]:
            self.assertRaises(ValueError, frames.encode_send_receipt, *bad)
            self.assertRaises(ValueError, _protobuf_receipt, *bad)

    @settings(max_examples=50, deadline=None)
    @given(_u64, st.lists(st.tuples(_u64, _u64, st.one_of(_u64, st.just(-1)), _u64), max_size=5))
    def test_receipts_of_one_producer(self, producer_id, receipts):
        """``encode_send_receipts``: each receipt's frame, one after the other."""
        self.assertEqual(frames.encode_send_receipts(producer_id, receipts),
                         b"".join(_protobuf_receipt(producer_id, *r) for r in receipts))

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

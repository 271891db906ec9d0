"""
Pulsar binary frames, as pure functions over bytes (no Twisted here).

A *simple* frame is ``[total_size u32][command_size u32][BaseCommand]``. A *payload* frame appends
the message: ``[magic 0x0e01 u16][crc32c u32][metadata_size u32][MessageMetadata][payload]``, where
the CRC32C covers everything after the checksum field. All integers are big-endian and
``total_size`` counts every byte after itself.

The broker keeps the message part (from the magic number on) exactly as received: it is what it
stores in the ledger and what it writes back behind MESSAGE commands, so the checksum a consumer
verifies is the producer's own.
"""

import struct

import crc32c as _crc32c

from pulsar_twisted.proto import PulsarApi_pb2 as api

MAGIC_CRC32C = 0x0E01
MAGIC_BROKER_ENTRY_METADATA = 0x0E02

#: Room for the command beyond maxMessageSize, as Pulsar allows (its frame padding).
FRAME_PADDING = 10 * 1024

_U32 = struct.Struct(">I")
_U16 = struct.Struct(">H")
_HEADER = struct.Struct(">II")
_MAGIC_CRC = struct.Struct(">HI")

crc32c = _crc32c.crc32c
_MessageMetadata = api.MessageMetadata
_BaseCommand = api.BaseCommand
_header = _HEADER.unpack_from
_u16 = _U16.unpack_from
_u32 = _U32.unpack_from


class FrameError(Exception):
    """A frame that cannot be decoded: the connection that sent it cannot be trusted any more."""


class ChecksumMismatch(Exception):
    """The message part of a payload frame failed its CRC32C check (the command itself is fine)."""


class TooLongFrame(FrameError):
    """A frame longer than the connection's limit."""

    def __init__(self, size: int, limit: int):
        super().__init__(f"frame of {size} bytes exceeds the limit of {limit} bytes")
        self.size = size
        self.limit = limit


def encode_command(command: api.BaseCommand) -> bytes:
    """A simple frame carrying ``command``."""
    body = command.SerializeToString()
    size = len(body)
    return _HEADER.pack(size + 4, size) + body


_U64_MAX = 0xFFFFFFFFFFFFFFFF
#: varints of 0..16383 (1 or 2 bytes), the usual producer ids and small sequence/entry ids
_SMALL_VARINTS = tuple(bytes((v,)) if v < 0x80 else bytes(((v & 0x7F) | 0x80, v >> 7))
                       for v in range(1 << 14))
#: BaseCommand ``type = SEND_RECEIPT`` (field 1, varint) and the tag of ``send_receipt`` (field 7,
#: length-delimited), which every receipt starts with.
_RECEIPT_PREFIX = bytes((0x08, api.BaseCommand.SEND_RECEIPT, (7 << 3) | 2))


#: the low 14 bits of a larger value as its first two varint bytes (continuation bits set)
_LOW14_VARINTS = tuple(bytes(((v & 0x7F) | 0x80, (v >> 7) | 0x80)) for v in range(1 << 14))


def _varint(value: int, _small=_SMALL_VARINTS, _low=_LOW14_VARINTS) -> bytes:
    if value < 0x4000:
        return _small[value]
    if value < 0x10000000:  # 3-4 bytes (ids up to 268 million): two table lookups, no loop
        return _low[value & 0x3FFF] + _small[value >> 14]
    out = bytearray()
    while value >= 0x80:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


def encode_send_receipt(producer_id: int, sequence_id: int, highest_sequence_id: int,
                        ledger_id: int, entry_id: int) -> bytes:
    """
    The SEND_RECEIPT frame, byte for byte what protobuf serialises for ``BaseCommand(type=SEND_RECEIPT,
    send_receipt=CommandSendReceipt(producer_id, sequence_id, highest_sequence_id,
    message_id=MessageIdData(ledgerId, entryId)))`` (fields in number order, all four set), built
    without protobuf objects: it is written once per stored message. ``ledger_id`` / ``entry_id``
    are taken modulo 2**64 (-1 is a duplicate's answer); ids outside uint64 raise ValueError, as
    protobuf does.
    """
    return encode_send_receipts(producer_id, ((sequence_id, highest_sequence_id, ledger_id, entry_id),))


def encode_send_receipts(producer_id: int, receipts, _small=_SMALL_VARINTS, _varint=_varint,
                         _pack=_HEADER.pack) -> bytes:
    """``encode_send_receipt`` of one producer's ``receipts``, ``(sequence_id, highest_sequence_id,
    ledger_id, entry_id)`` each, the frames one after the other (joined once)."""
    if not 0 <= producer_id <= _U64_MAX:
        raise ValueError(f"receipt producer id out of uint64 range: {producer_id}")
    # CommandSendReceipt: producer_id = 1, sequence_id = 2, message_id = 3, highest_sequence_id = 4;
    # MessageIdData: ledgerId = 1, entryId = 2 (varints). Ids under 2**14 (1-2 byte varints) come
    # from a table; a receipt's highest id is usually its sequence id, encoded once. Each part is
    # at most 57 bytes, so every length is one varint byte.
    pid = b"".join((b"\x08", _small[producer_id] if producer_id < 0x4000 else _varint(producer_id),
                    b"\x10"))
    fixed = len(pid) + 3      # pid, then the tags of message_id and highest, and message_id's length
    parts = []
    for sequence_id, highest_sequence_id, ledger_id, entry_id in receipts:
        if not (0 <= sequence_id <= _U64_MAX and 0 <= highest_sequence_id <= _U64_MAX):
            raise ValueError(f"receipt ids out of uint64 range: {producer_id}, {sequence_id}, "
                             f"{highest_sequence_id}")
        seq = _small[sequence_id] if sequence_id < 0x4000 else _varint(sequence_id)
        high = seq if highest_sequence_id == sequence_id else (
            _small[highest_sequence_id] if highest_sequence_id < 0x4000 else _varint(highest_sequence_id))
        ledger_id &= _U64_MAX
        entry_id &= _U64_MAX
        lid = _small[ledger_id] if ledger_id < 0x4000 else _varint(ledger_id)
        eid = _small[entry_id] if entry_id < 0x4000 else _varint(entry_id)
        mid = len(lid) + len(eid) + 2
        size = fixed + len(seq) + mid + len(high)
        parts += (_pack(size + 8, size + 4), _RECEIPT_PREFIX, _small[size], pid, seq, b"\x1a",
                  _small[mid], b"\x08", lid, b"\x10", eid, b"\x20", high)
    return b"".join(parts)


def encode_payload_command(command: api.BaseCommand, message: bytes) -> bytes:
    """A payload frame: ``command`` followed by ``message`` (magic, checksum, metadata, payload)."""
    body = command.SerializeToString()
    size = len(body)
    return _HEADER.pack(size + 4 + len(message), size) + body + message


def encode_message(metadata: api.MessageMetadata, payload: bytes) -> bytes:
    """The message part of a payload frame, checksum included, as a producer writes it."""
    meta = metadata.SerializeToString()
    rest = _U32.pack(len(meta)) + meta + payload
    return _MAGIC_CRC.pack(MAGIC_CRC32C, crc32c(rest)) + rest


def _locate_metadata(message, verify: bool) -> tuple:
    """
    ``(offset, size)`` of the MessageMetadata in a message part, every length checked against the
    bytes there are (``FrameError``). The one reader of the message-part layout: a leading
    broker-entry-metadata block (magic 0x0e02) is skipped; with ``verify`` the CRC32C after the
    0x0e01 magic is checked (``ChecksumMismatch``). A message without the checksum magic (very old
    clients) is read as ``[metadata_size][metadata][payload]``.
    """
    # On the dispatch path for every entry: reads past the end are left to struct.error (a try
    # costs nothing until it raises) rather than tested before each read.
    try:
        offset = 0
        magic = _u16(message, 0)[0]
        if magic == MAGIC_BROKER_ENTRY_METADATA:
            offset = 6 + _u32(message, 2)[0]
            magic = _u16(message, offset)[0]
        if magic == MAGIC_CRC32C:
            expected = _u32(message, offset + 2)[0]
            offset += 6
            meta_size = _u32(message, offset)[0]
            if verify and crc32c(memoryview(message)[offset:]) != expected:
                raise ChecksumMismatch("message checksum mismatch")
        else:
            meta_size = _u32(message, offset)[0]
    except struct.error:
        raise FrameError(f"message part of {len(message)} bytes is too short") from None
    offset += 4
    if meta_size > len(message) - offset:
        raise FrameError(f"metadata size {meta_size} exceeds the frame")
    return offset, meta_size


def split_message(message: bytes, verify: bool = True):
    """
    Split a stored/received message part into ``(metadata_bytes, payload)`` (copies of both).
    ``FrameError`` when its lengths do not add up; with ``verify``, ``ChecksumMismatch`` when its
    CRC32C is wrong (see ``_locate_metadata``).
    """
    offset, meta_size = _locate_metadata(message, verify)
    view = memoryview(message)
    return bytes(view[offset:offset + meta_size]), bytes(view[offset + meta_size:])


def entry_metadata(message: bytes) -> api.MessageMetadata:
    """
    The MessageMetadata of a stored entry or received message part, checksum not verified: the
    broker's per-entry read on the dispatch path. Nothing but the metadata is copied, and bytes
    that do not hold one (truncated, lengths past the end, a protobuf that does not parse) are
    ``FrameError``, never whatever ``struct`` or protobuf raised, so callers need one ``except``.
    """
    offset, meta_size = _locate_metadata(message, False)
    try:
        return _MessageMetadata.FromString(message[offset:offset + meta_size])
    except Exception as e:  # protobuf raises DecodeError and, for missing fields, others
        raise FrameError(f"bad message metadata: {e}") from e


def parse_metadata(message: bytes, verify: bool = False) -> api.MessageMetadata:
    """``entry_metadata``, with the CRC32C checked first when ``verify`` (``ChecksumMismatch``)."""
    if verify:
        _locate_metadata(message, True)
    return entry_metadata(message)


def verify_message(message: bytes) -> None:
    """Raise ``ChecksumMismatch`` unless the message part carries a correct CRC32C (when it has one)."""
    if len(message) >= 6 and _U16.unpack_from(message, 0)[0] == MAGIC_CRC32C:
        if crc32c(memoryview(message)[6:]) != _U32.unpack_from(message, 2)[0]:
            raise ChecksumMismatch("message checksum mismatch")


class FrameDecoder:
    """
    Incremental decoder: ``feed(data)`` returns the complete frames received so far as
    ``(BaseCommand, message_bytes_or_None)`` pairs and keeps the rest.

    Raises ``TooLongFrame`` as soon as a header announces more than ``max_frame_size`` bytes
    (before buffering them) and ``FrameError`` for a frame that does not decode; after either,
    the stream is out of step and the caller should close the connection.
    """

    __slots__ = ("max_frame_size", "_buffer")

    def __init__(self, max_frame_size: int):
        self.max_frame_size = max_frame_size
        self._buffer = bytearray()

    def feed(self, data: bytes):
        buf = self._buffer
        buf += data
        frames = []
        offset = 0
        end = len(buf)
        limit = self.max_frame_size
        append = frames.append
        parse = _BaseCommand.FromString
        # decode_frame_body, inline: this loop runs once per received frame. Slices of a view
        # copy once (a bytearray's slice, then bytes of it, would copy twice); the view is
        # released before the buffer is trimmed.
        view = memoryview(buf)
        try:
            while end - offset >= 8:
                total, cmd_size = _header(buf, offset)
                if total > limit:
                    raise TooLongFrame(total, limit)
                if end - offset - 4 < total:
                    break
                if total < 4:
                    raise FrameError(f"frame of {total} bytes is too short for a command")
                if cmd_size > total - 4 or cmd_size == 0:
                    raise FrameError(f"command size {cmd_size} does not fit a frame of {total} bytes")
                cmd_start = offset + 8
                cmd_end = cmd_start + cmd_size
                offset += 4 + total
                try:
                    command = parse(view[cmd_start:cmd_end])
                except Exception as e:
                    raise FrameError(f"command does not decode: {e}") from e
                append((command, view[cmd_end:offset].tobytes() if cmd_end < offset else None))
        finally:
            view.release()
        if end - offset >= 4:
            # A frame whose header is not all here yet may already announce too much (or be too
            # short to hold the command size: that waits for its bytes, then fails above).
            total = _U32.unpack_from(buf, offset)[0]
            if total > limit:
                raise TooLongFrame(total, limit)
            if total < 4 and end - offset - 4 >= total:
                raise FrameError(f"frame of {total} bytes is too short for a command")
        if offset:
            del buf[:offset]
        return frames

    def buffered(self) -> int:
        """Bytes received but not yet part of a complete frame."""
        return len(self._buffer)


def decode_frame_body(buf, start: int, total: int):
    """Decode one frame body (the ``total`` bytes after the size field) at ``start`` of ``buf``."""
    if total < 4:
        raise FrameError(f"frame of {total} bytes is too short for a command")
    cmd_size = _U32.unpack_from(buf, start)[0]
    if cmd_size > total - 4 or cmd_size == 0:
        raise FrameError(f"command size {cmd_size} does not fit a frame of {total} bytes")
    cmd_start = start + 4
    command = api.BaseCommand()
    try:
        command.ParseFromString(bytes(buf[cmd_start:cmd_start + cmd_size]))
    except Exception as e:
        raise FrameError(f"command does not decode: {e}") from e
    rest = total - 4 - cmd_size
    message = bytes(buf[cmd_start + cmd_size:start + total]) if rest else None
    return command, message

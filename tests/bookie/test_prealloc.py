"""
The journal's preallocation (bookie/prealloc.py): space allocated ahead of the writer, never over
records, read back as the clean end of a file and cut before appending again.
"""

import os

from twisted.internet import defer, reactor
from twisted.trial import unittest

from pulsar_twisted.bookie import formats
from pulsar_twisted.bookie.journal import Journal, journal_path, replay_journal
from pulsar_twisted.bookie.prealloc import Preallocator

#: A unit of preallocation in these tests.
CHUNK = 64 * 1024


def key_record(ledger_id: int) -> bytes:
    return formats.encode_journal_record(formats.REC_MASTER_KEY, ledger_id, 0, b"key")


class HeldThreads:
    """``start_thread`` that keeps the fills to run them when the test says."""

    def __init__(self):
        self.held = []

    def __call__(self, target):
        self.held.append(target)

    def run_all(self):
        held, self.held = self.held, []
        for target in held:
            target()


class PreallocatorTests(unittest.TestCase):

    def setUp(self):
        self.path = self.mktemp()
        self.fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
        self.addCleanup(os.close, self.fd)
        self.threads = HeldThreads()
        self.prealloc = Preallocator(4 * CHUNK, start_thread=self.threads)
        self.prealloc.reset(self.fd, 0)

    def write(self, offset: int, data: bytes):
        self.prealloc.claim(offset + len(data))
        os.pwrite(self.fd, data, offset)

    def test_fills_ahead_once_half_is_used(self):
        self.write(0, b"r" * 100)
        self.assertEqual(len(self.threads.held), 1, "a fill starts with the first write")
        self.write(100, b"r" * 100)
        self.assertEqual(len(self.threads.held), 1, "one fill at a time")
        self.threads.run_all()
        self.assertEqual(os.fstat(self.fd).st_size, 200 + 4 * CHUNK)
        self.assertEqual(self.prealloc.fills, 1)
        with open(self.path, "rb") as f:
            data = f.read()
        self.assertEqual(data[:200], b"r" * 200)
        self.assertFalse(any(data[200:]))
        # Writes within the first half start nothing; past it, the next fill.
        self.write(200, b"s" * (2 * CHUNK))
        self.assertEqual(self.threads.held, [])
        self.write(200 + 2 * CHUNK, b"t" * 100)
        self.assertEqual(len(self.threads.held), 1)
        self.threads.run_all()
        self.assertEqual(os.fstat(self.fd).st_size, 200 + 8 * CHUNK, "filled up to size past the old end")
        with open(self.path, "rb") as f:
            data = f.read()
        self.assertEqual(data[:300 + 2 * CHUNK], b"r" * 200 + b"s" * (2 * CHUNK) + b"t" * 100)
        self.assertFalse(any(data[300 + 2 * CHUNK:]))

    def test_a_fill_never_writes_over_what_the_writer_wrote_since(self):
        """The writer outran a fill that had not started: the fill starts past the writer's end."""
        self.write(0, b"a" * 100)
        self.write(100, b"b" * (3 * CHUNK))    # past where zeros would have been
        self.threads.run_all()
        with open(self.path, "rb") as f:
            data = f.read()
        self.assertEqual(data[:100 + 3 * CHUNK], b"a" * 100 + b"b" * (3 * CHUNK))
        self.assertFalse(any(data[100 + 3 * CHUNK:]))

    def test_a_fill_goes_to_the_current_file_only(self):
        self.write(0, b"a" * 100)
        other = os.open(self.mktemp(), os.O_RDWR | os.O_CREAT, 0o644)
        self.addCleanup(os.close, other)
        self.prealloc.reset(other, 10)     # rolled to another file before the fill ran
        self.threads.run_all()
        self.assertEqual(os.fstat(self.fd).st_size, 100, "the old file is left alone")
        self.assertEqual(os.fstat(other).st_size, 10 + 4 * CHUNK)

    def test_nothing_starts_without_a_file(self):
        self.prealloc.reset(-1, 0)         # closed: nothing starts
        self.prealloc.claim(10)
        self.assertEqual(self.threads.held, [])

    def test_a_failed_fill_turns_preallocation_off(self):
        self.write(0, b"a" * 100)
        os.close(self.fd)
        self.fd = os.open(self.path, os.O_RDONLY)     # the fill's writes now fail (EBADF)
        self.prealloc.reset(self.fd, 100)
        self.threads.run_all()
        self.assertEqual(self.prealloc.failures, 1)
        self.assertEqual(self.prealloc.size, 0)
        self.prealloc.claim(200)
        self.assertEqual(self.threads.held, [])
        self.flushLoggedErrors()

    def test_never_past_the_limit(self):
        prealloc = Preallocator(4 * CHUNK, limit=CHUNK + 10, start_thread=self.threads)
        prealloc.reset(self.fd, 0)
        prealloc.claim(100)
        os.pwrite(self.fd, b"a" * 100, 0)
        self.threads.run_all()
        self.assertEqual(os.fstat(self.fd).st_size, CHUNK + 10)

    def test_the_writer_never_waits_for_an_allocation(self):
        """While a fill's fallocate runs (held here), claims past the mark return at once, and the
        fill then moves the mark no lower than what the writer claimed."""
        import threading
        from pulsar_twisted.bookie import prealloc as prealloc_module
        running, release = threading.Event(), threading.Event()
        real = prealloc_module.fallocate

        def held(fd, offset, length):
            running.set()
            release.wait(10)
            real(fd, offset, length)
        self.patch(prealloc_module, "fallocate", held)
        prealloc = Preallocator(4 * CHUNK, start_thread=lambda target: threading.Thread(target=target).start())
        prealloc.reset(self.fd, 0)
        prealloc.claim(100)
        self.assertTrue(running.wait(10))
        prealloc.claim(8 * CHUNK)          # past the fill's target: no lock held to wait on
        self.assertEqual(prealloc.allocated_to, 8 * CHUNK)
        release.set()
        for _ in range(1000):
            if not prealloc._filling:
                break
            threading.Event().wait(0.01)
        self.assertEqual(prealloc.allocated_to, 8 * CHUNK)

    def test_fallocate_is_the_system_call(self):
        from pulsar_twisted.bookie.prealloc import fallocate
        fallocate(self.fd, 0, CHUNK)
        self.assertEqual(os.fstat(self.fd).st_size, CHUNK)
        readonly = os.open(self.path, os.O_RDONLY)
        self.addCleanup(os.close, readonly)
        self.assertRaises(OSError, fallocate, readonly, 0, 2 * CHUNK)

    def test_off(self):
        prealloc = Preallocator(0, start_thread=self.threads)
        prealloc.reset(self.fd, 0)
        prealloc.claim(100)
        self.assertEqual(self.threads.held, [])


class JournalPreallocationTests(unittest.TestCase):
    """A journal with preallocation on, the real reactor and thread."""

    def setUp(self):
        self.dir = self.mktemp()
        os.makedirs(self.dir)

    def open(self, **kw) -> Journal:
        journal = Journal(self.dir, reactor, prealloc_bytes=2 * CHUNK, **kw)
        journal.prealloc._start_thread = lambda target: target()   # fill at once, in the writer
        journal.open(replay_journal(self.dir))
        return journal

    @defer.inlineCallbacks
    def test_records_replay_and_the_zero_tail_is_cut(self):
        journal = self.open()
        records = [key_record(i) for i in range(50)]
        yield defer.gatherResults([journal.append((r,), len(r)) for r in records])
        path = journal_path(self.dir, journal.file_id)
        end = formats.JOURNAL_HEADER.size + sum(map(len, records))
        self.assertEqual(os.path.getsize(path), end + 2 * CHUNK)
        yield journal.stop()
        result = replay_journal(self.dir)
        self.assertEqual([r[1] for r in result.records], list(range(50)))
        self.assertEqual(result.problems, [])
        self.assertEqual((result.append_file, result.append_offset), (journal.file_id, end))
        self.assertEqual(os.path.getsize(path), end, "the zeros are cut before appending again")
        # Reopened: appends follow the last record, and everything replays.
        journal = self.open()
        more = [key_record(i) for i in range(50, 60)]
        yield defer.gatherResults([journal.append((r,), len(r)) for r in more])
        yield journal.stop()
        result = replay_journal(self.dir)
        self.assertEqual([r[1] for r in result.records], list(range(60)))
        self.assertEqual(result.problems, [])

    @defer.inlineCallbacks
    def test_rolled_files_keep_their_zero_tails_and_replay(self):
        journal = self.open()
        journal._max_size = journal.prealloc.limit = 4096
        records = [key_record(i) for i in range(300)]
        for r in records:
            yield journal.append((r,), len(r))
        yield journal.stop()
        self.assertGreater(journal.file_id, 1)
        result = replay_journal(self.dir)
        self.assertEqual([r[1] for r in result.records], list(range(300)))
        self.assertEqual(result.problems, [])

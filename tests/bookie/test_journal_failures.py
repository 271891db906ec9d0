"""BookieStorage over a journal whose writes fail: what a refused group leaves behind must not cost
an acknowledged record, or the data of a ledger whose delete was never made durable, at the next
crash. Real files, the real reactor and journal; the journal's fdatasync is made to fail."""

import os

from twisted.internet import defer

from pulsar_twisted.bookie import journal as journal_module
from pulsar_twisted.bookie.journal import JournalWriteError, journal_path

from tests.bookie.test_storage import KEY, StorageTestBase


class JournalFailureTests(StorageTestBase):

    def fail_journal_syncs(self, storage, count: int) -> None:
        """The next ``count`` fdatasyncs of the journal's current file fail (EIO); other files'
        (entry logs, index, a new journal file's header) are untouched."""
        real = os.fdatasync
        left = [count]

        def fdatasync(fd):
            if left[0] and fd == storage._journal._fd:
                left[0] -= 1
                raise OSError(5, "Input/output error")
            real(fd)
        self.patch(journal_module.os, "fdatasync", fdatasync)

    def drop_region(self, file_id: int, start: int, end: int) -> None:
        """What a power cut leaves of pages a failed fdatasync dropped: zeros."""
        with open(journal_path(self.journal_dir, file_id), "r+b") as f:
            f.seek(start)
            f.write(bytes(end - start))

    @defer.inlineCallbacks
    def test_new_ledger_key_survives_its_refused_first_group(self):
        """A new ledger's first add is refused (with its MASTER_KEY record, in the same group); the
        writer's next add, already on its way, is acknowledged from the next journal file. After a
        crash that took the refused group's pages, the ledger must come back with its key: a ledger
        replayed without one refuses its own writer's adds and its reader's recovery fence."""
        storage = yield self.open()
        journal = storage._journal
        yield storage.add_entry(4, 0, self.data(4, 0), KEY)     # the file holds an acknowledged record
        first_file, start = journal.file_id, journal._offset
        self.fail_journal_syncs(storage, 1)
        yield self.assertFailure(storage.add_entry(5, 0, self.data(5, 0), KEY), JournalWriteError)
        end = journal._dirty_end
        yield storage.add_entry(5, 1, self.data(5, 1), KEY, 0)
        self.assertEqual(journal.file_id, first_file + 1)
        self.crash(storage)
        self.drop_region(first_file, start, end)

        storage = yield self.open()
        yield self.assert_entries(storage, 5, [1])
        yield storage.fence_ledger(5, KEY)
        yield storage.add_entry(5, 2, self.data(5, 2), KEY, 1, recovery_add=True)

    @defer.inlineCallbacks
    def test_key_of_a_ledger_fenced_first_survives_its_refused_group(self):
        """The same for a ledger a fence creates: its refused FENCE took the MASTER_KEY record with
        it; the next fence is acknowledged and must bring the key back after a crash."""
        storage = yield self.open()
        journal = storage._journal
        yield storage.add_entry(4, 0, self.data(4, 0), KEY)     # the file holds an acknowledged record
        first_file, start = journal.file_id, journal._offset
        self.fail_journal_syncs(storage, 1)
        yield self.assertFailure(storage.fence_ledger(6, KEY), JournalWriteError)
        end = journal._dirty_end
        yield storage.fence_ledger(6, KEY)
        self.crash(storage)
        self.drop_region(first_file, start, end)

        storage = yield self.open()
        self.assertTrue(storage.is_fenced(6))
        yield storage.fence_ledger(6, KEY)

    @defer.inlineCallbacks
    def _deleted_ledger_with_a_refused_delete(self):
        """A storage whose ledger 1 (about ten entry logs of its own) was deleted in memory, but
        whose DELETE record was refused: ``(storage, (file, start, end))`` of the refused group."""
        storage = yield self.open(entry_log_size_limit=4096)
        yield self.fill(storage, 1, 40, size=1000)
        yield storage.checkpoint()
        yield self.fill(storage, 2, 3)
        yield storage.checkpoint()
        journal = storage._journal
        region = [journal.file_id, journal._offset]
        self.fail_journal_syncs(storage, 1)
        yield self.assertFailure(storage.delete_ledger(1), JournalWriteError)
        region.append(journal._dirty_end)
        return storage, region

    @defer.inlineCallbacks
    def test_gc_keeps_a_ledger_whose_delete_was_refused(self):
        """A refused DELETE is not durable: until a checkpoint lists the ledger as deleted, GC must
        keep its entry logs, or a crash brings the ledger back from its index file with its
        entries gone."""
        storage, region = yield self._deleted_ledger_with_a_refused_delete()
        figures = yield storage.gc()
        self.assertEqual(figures["logs_deleted"], 0)
        self.crash(storage)
        self.drop_region(*region)

        storage = yield self.open()
        if storage.has_ledger(1):
            yield self.assert_entries(storage, 1, range(40), size=1000)

    @defer.inlineCallbacks
    def test_a_refused_delete_is_made_durable_by_the_next_checkpoint(self):
        """The ledger stays deleted in memory; the next checkpoint lists it as deleted, after which
        GC reclaims its logs and a crash does not bring it back."""
        storage, region = yield self._deleted_ledger_with_a_refused_delete()
        yield storage.checkpoint()
        figures = yield storage.gc()
        self.assertGreaterEqual(figures["logs_deleted"], 9)
        self.crash(storage)
        self.drop_region(*region)

        storage = yield self.open()
        self.assertFalse(storage.has_ledger(1))
        yield self.assert_entries(storage, 2, range(3))

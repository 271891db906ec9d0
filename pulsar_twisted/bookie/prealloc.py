"""
Zero-filled space ahead of the journal's append offset (BookKeeper's ``journalPreAllocSizeMB``).

An ``fdatasync`` after an append that grows the file must also make the new file size durable: on
ext4 that is a journal commit besides the data's own flush. Written over blocks that are already
allocated, zero-filled and durable, the same ``fdatasync`` flushes only the data. Measured with
``scripts/bench_fsync.py`` on this project's machines: 100-byte ``pwrite`` + ``fdatasync`` over
zero-filled space takes about 0.7x the wall time and 0.75x the kernel CPU of an appending one.

``Preallocator`` keeps ``size`` bytes of such space ahead: once the writer's end comes within half of
it, a short-lived thread writes zeros past the zero-filled end in ``CHUNK`` pieces (each under the
lock, each made durable before the next, a pause between them), so the writer never waits for the
zero-filling unless it outruns it. Replay reads an all-zero record header as the clean end of a file
(``formats.RecordScanner``), and cuts a last file's zero tail before appending to it again.

The writer (whichever thread writes the journal, one at a time) calls ``claim(end)`` before writing
up to ``end`` and ``reset(fd, end)`` when it opens another file or closes its own: the filling
thread checks, under the lock, that the file is still the one it was started for before each
piece, so it never writes into a newer file or over records.
"""

import os
import threading
import time

from twisted.logger import Logger

log = Logger()

#: Bytes zero-filled per write (and fdatasync). Small, because the writer's own fdatasync covers
#: the whole file and so waits for any zeros still dirty: measured with a writer fsyncing 120-byte
#: records while a thread filled ahead, 1 MiB pieces put 40-100 ms into the writer's p99.9, 64 KiB
#: pieces nothing measurable.
CHUNK = 64 * 1024

#: Seconds between two pieces: a fill (256 pieces for 16 MiB) leaves the disk to the writer.
PIECE_PAUSE_S = 0.001

_ZEROS = bytes(CHUNK)


class Preallocator:
    """``Preallocator(size, limit)``: keep ``size`` bytes zero-filled past the writer's end (0: off),
    never past ``limit`` (the size at which the journal starts a new file; None: no limit)."""

    def __init__(self, size: int, limit: int = None, start_thread=None):
        self.size = max(0, int(size))
        self.limit = limit
        self._lock = threading.Lock()
        self._fd = -1
        self._generation = 0
        self._zeroed_to = 0         # offset up to which the file is written (records or zeros)
        self._filling = False
        self._start_thread = start_thread or _daemon_thread
        #: Zero-fills finished, and those given up on an OSError (the writer is unaffected).
        self.fills = 0
        self.failures = 0

    def reset(self, fd: int, end: int) -> None:
        """The writer now writes ``fd`` (-1: none), whose data ends at ``end``, nothing past it."""
        with self._lock:
            self._generation += 1
            self._fd = fd
            self._zeroed_to = end

    def claim(self, end: int) -> None:
        """The writer is about to write up to ``end``: nothing may be zero-filled below it, and the
        next fill starts once less than half of ``size`` is left past it."""
        if end > self._zeroed_to:
            with self._lock:
                if end > self._zeroed_to:
                    self._zeroed_to = end
        if self.size and not self._filling and self._zeroed_to - end < self.size // 2 and self._fd >= 0:
            self._filling = True
            self._start_thread(self._fill)

    @property
    def zeroed_to(self) -> int:
        return self._zeroed_to

    def _fill(self) -> None:
        """The filling thread: zeros up to ``size`` past where they end now, piece by piece."""
        try:
            with self._lock:
                if self._fd < 0:
                    return
                generation, fd = self._generation, os.dup(self._fd)
                target = self._zeroed_to + self.size
                if self.limit is not None:
                    target = min(target, self.limit)
            try:
                while True:
                    with self._lock:
                        start = self._zeroed_to
                        if self._generation != generation or start >= target:
                            break
                        n = min(CHUNK, target - start)
                        _pwrite_all(fd, memoryview(_ZEROS)[:n], start)
                        self._zeroed_to = start + n
                    os.fdatasync(fd)
                    time.sleep(PIECE_PAUSE_S)
                self.fills += 1
            finally:
                os.close(fd)
        except OSError as e:
            # Appends do not need the zeros (only their fsyncs are cheaper over them): stop
            # filling rather than retry at every group on a full or failing disk.
            self.failures += 1
            self.size = 0
            log.warn("journal: zero-filling ahead of the writer failed ({err}); appends go on "
                     "without preallocation", err=e)
        finally:
            self._filling = False


def _pwrite_all(fd: int, view, offset: int) -> None:
    while view:
        written = os.pwrite(fd, view, offset)
        view = view[written:]
        offset += written


def _daemon_thread(target) -> None:
    threading.Thread(target=target, name="bookie-journal-prealloc", daemon=True).start()

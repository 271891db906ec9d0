"""Logging helpers for tests: collecting our log events as text, and filing the official client's log."""

import logging
from contextlib import contextmanager

from twisted.logger import formatEvent, globalLogPublisher


@contextmanager
def formatted_log_events():
    """Yield a list that receives each event published to the global log publisher, formatted as text,
    until the block ends."""
    events = []

    def observer(event):
        events.append(formatEvent(event))
    globalLogPublisher.addObserver(observer)
    try:
        yield events
    finally:
        globalLogPublisher.removeObserver(observer)


def official_client_logger(name: str, path: str) -> logging.Logger:
    """The stdlib logger ``name`` set up for the official (C++) client: ERROR and above, into the file
    ``path`` only, not the test output. Set up once per name."""
    logger = logging.getLogger(name)
    logger.setLevel(logging.ERROR)
    logger.propagate = False
    if not logger.handlers:
        logger.addHandler(logging.FileHandler(path))
    return logger

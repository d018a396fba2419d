"""librdkafka's own log lines in Python logging: the logger every Kafka client of the project is
given (:data:`LIBRDKAFKA_LOGGER`), and the filters that keep it readable.

librdkafka logs each failed connection attempt of each of its broker threads, so one broker down
for ten seconds fills a task log with the same line dozens of times a second (the soak's watcher
logged 13 identical lines within one millisecond while the broker was killed). The same line is
kept once per :data:`REPEAT_WINDOW_S` seconds, and the next one after the window says how many
were left out (:class:`RepeatedLines`).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable

LIBRDKAFKA_LOGGER = "cdclake.io.kafka.librdkafka"
"""The Python logger of librdkafka's own log lines (level 3 and up; ``logger`` of every client), not
the process's stderr: a command line tool silences it (what matters reaches it as exceptions)."""

REPEAT_WINDOW_S = 30.0
"""Seconds during which a line identical to one just logged is left out (:class:`RepeatedLines`)."""

_MAX_LINES = 1000
"""Distinct lines :class:`RepeatedLines` remembers; past it, those older than the window are
forgotten (a process that runs for days keeps a bounded table)."""


class TeardownNoise(logging.Filter):
    """Drops librdkafka's reports of a connection torn down while it was being set up
    (``... (after 0ms in state DOWN)``): a consumer closed right after its one call leaves its
    group-coordinator connection half-made, which over SASL reads as an "authentication error"
    although nothing failed. A refused login is still reported (the clients' error callback,
    :mod:`cdclake.io.kafka`)."""

    def filter(self, record: logging.LogRecord) -> bool:
        return "in state DOWN)" not in record.getMessage()


class RepeatedLines(logging.Filter):
    """Keeps a line once per ``window_s`` seconds: a record whose logger, level and message equal
    one kept less than ``window_s`` seconds before is dropped and counted; the first identical
    record after the window is kept with `` (N identical line(s) left out in the last S s)``
    appended to its message.

    Args:
        window_s: the window in seconds (:data:`REPEAT_WINDOW_S`).
        clock: seconds from a monotonic clock (``time.monotonic``; a test passes its own).
    """

    def __init__(self, window_s: float = REPEAT_WINDOW_S, clock: Callable[[], float] = time.monotonic) -> None:
        super().__init__()
        self._window_s = window_s
        self._clock = clock
        self._lock = threading.Lock()  # librdkafka logs from its own threads
        self._kept: dict[tuple[str, int, str], tuple[float, int]] = {}  # line -> (kept at, left out since)

    def filter(self, record: logging.LogRecord) -> bool:
        message = record.getMessage()
        line = (record.name, record.levelno, message)
        now = self._clock()
        with self._lock:
            kept_at, left_out = self._kept.get(line, (None, 0))
            if kept_at is not None and now - kept_at < self._window_s:
                self._kept[line] = (kept_at, left_out + 1)
                return False
            if len(self._kept) >= _MAX_LINES:
                self._kept = {k: v for k, v in self._kept.items() if now - v[0] < self._window_s}
            self._kept[line] = (now, 0)
        if left_out:
            record.msg = f"{message} ({left_out} identical line(s) left out in the last {now - kept_at:.0f} s)"  # type: ignore[operator]
            record.args = None
        return True


def librdkafka_logger() -> logging.Logger:
    """The logger handed to every librdkafka client (:data:`LIBRDKAFKA_LOGGER`), its filters added
    once per process."""
    logger = logging.getLogger(LIBRDKAFKA_LOGGER)
    if not any(isinstance(f, RepeatedLines) for f in logger.filters):
        logger.addFilter(TeardownNoise())
        logger.addFilter(RepeatedLines())
    return logger

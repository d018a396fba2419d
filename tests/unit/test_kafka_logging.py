"""librdkafka's log lines: a repeated line is kept once per window (cdclake.io.kafka_logging)."""

from __future__ import annotations

import logging
from collections.abc import Iterator

import pytest

from cdclake.io.kafka_logging import LIBRDKAFKA_LOGGER, RepeatedLines, librdkafka_logger

REFUSED = "FAIL [rdkafka#consumer-26] [thrd:sasl_plaintext://127.0.0.1:21693/bootstrap]: Connect to %s failed: Connection refused"


class Clock:
    """Seconds the test sets (the filter's clock; the window is what is under test)."""

    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def logger_and_clock(caplog: pytest.LogCaptureFixture) -> Iterator[tuple[logging.Logger, Clock]]:
    clock = Clock()
    logger = logging.getLogger("tests.kafka_logging.repeated")
    repeated = RepeatedLines(window_s=30.0, clock=clock)
    logger.addFilter(repeated)
    caplog.set_level(logging.INFO, logger=logger.name)
    yield logger, clock
    logger.removeFilter(repeated)


def test_a_line_repeated_within_the_window_is_kept_once_and_the_next_one_counts_the_rest(
    logger_and_clock: tuple[logging.Logger, Clock], caplog: pytest.LogCaptureFixture
) -> None:
    logger, clock = logger_and_clock
    for _ in range(13):
        logger.error(REFUSED, "ipv4#127.0.0.1:21693")
    logger.error(REFUSED, "ipv4#127.0.0.1:30000")  # another line: kept
    logger.warning(REFUSED, "ipv4#127.0.0.1:21693")  # another level: kept
    clock.now += 29.0
    logger.error(REFUSED, "ipv4#127.0.0.1:21693")
    assert [r.getMessage() for r in caplog.records] == [
        REFUSED % "ipv4#127.0.0.1:21693",
        REFUSED % "ipv4#127.0.0.1:30000",
        REFUSED % "ipv4#127.0.0.1:21693",
    ]
    clock.now += 1.5
    logger.error(REFUSED, "ipv4#127.0.0.1:21693")
    assert caplog.records[-1].getMessage() == (
        REFUSED % "ipv4#127.0.0.1:21693" + " (13 identical line(s) left out in the last 30 s)"
    )
    clock.now += 31.0
    logger.error(REFUSED, "ipv4#127.0.0.1:21693")
    assert caplog.records[-1].getMessage() == REFUSED % "ipv4#127.0.0.1:21693"
    assert len(caplog.records) == 5


def test_every_client_gets_the_one_logger_with_its_filters_once() -> None:
    first, second = librdkafka_logger(), librdkafka_logger()
    assert first is second is logging.getLogger(LIBRDKAFKA_LOGGER)
    assert sum(isinstance(f, RepeatedLines) for f in first.filters) == 1
    assert not first.filter(logging.makeLogRecord({"msg": "Connect to 127.0.0.1:1 (after 0ms in state DOWN)"}))

"""Waiting for a restarting Spark Connect server (:func:`cdclake.spark.session.wait_for_engine`),
against real sockets on loopback: a listener that appears within the wait is found, and nothing
listening fails after the wait with the connection's own error."""

from __future__ import annotations

import logging
import socket
import threading
import time

import pytest

from cdclake.spark.session import wait_for_engine
from cdclake_dev.process import free_port


def test_a_server_that_starts_listening_within_the_wait_is_found(caplog):
    port = free_port()
    server = socket.socket()
    server.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)

    def listen_later() -> None:
        time.sleep(3)  # a restart: the port is closed for a while, then accepts connections
        server.bind(("127.0.0.1", port))
        server.listen()

    thread = threading.Thread(target=listen_later, daemon=True)
    thread.start()
    try:
        with caplog.at_level(logging.INFO, logger="cdclake.spark.session"):
            wait_for_engine("127.0.0.1", port, wait_s=30)
        waits = [r for r in caplog.records if "waiting up to 30 s" in r.getMessage()]
        assert len(waits) == 1 and waits[0].levelno == logging.WARNING  # said once, not on every try
        assert any("accepts connections" in r.getMessage() for r in caplog.records)
    finally:
        thread.join()
        server.close()


def test_nothing_listening_fails_after_the_wait_with_the_connection_error():
    port = free_port()
    started = time.monotonic()
    with pytest.raises(ConnectionRefusedError):
        wait_for_engine("127.0.0.1", port, wait_s=3)
    assert time.monotonic() - started >= 3  # it tried for the whole wait, not once


def test_a_server_already_listening_is_found_without_a_warning(caplog):
    with socket.socket() as server:
        server.bind(("127.0.0.1", 0))
        server.listen()
        with caplog.at_level(logging.INFO, logger="cdclake.spark.session"):
            wait_for_engine("127.0.0.1", server.getsockname()[1], wait_s=30)
    assert not caplog.records

"""Waiting for a restarting Spark Connect server (:func:`cdclake.spark.session.wait_for_engine`),
against real sockets on loopback: a listener that appears within the wait is found, and nothing
listening fails after the wait with the connection's own error."""

from __future__ import annotations

import logging
import socket
import subprocess
import sys
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


_DEAD_SERVER_CLIENT = """
import logging, sys
from pyspark.sql import SparkSession
from pyspark.sql.connect.client.retries import DefaultPolicy
from cdclake.spark.session import unpersist_quietly
logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(message)s", stream=sys.stdout)
spark = SparkSession.builder.remote(sys.argv[1]).create()
spark.client.set_retry_policies([DefaultPolicy(max_retries=0)])
df = spark.range(3)
unpersist_quietly(df)
print("RETURNED", flush=True)
df.unpersist()
"""


def test_a_cache_released_on_a_dead_server_warns_instead_of_raising():
    """The clean-up of a run whose Spark Connect server died (nothing listens on its port) logs a
    warning and returns, so the run's own error is the one raised; a plain ``unpersist`` raises.
    In a process of its own: a Connect session switches the process to Connect mode."""
    url = f"sc://127.0.0.1:{free_port()}"
    done = subprocess.run([sys.executable, "-c", _DEAD_SERVER_CLIENT, url], capture_output=True, text=True, timeout=120)
    assert "WARNING could not release a cached batch" in done.stdout, done.stdout + done.stderr
    assert "RETURNED" in done.stdout, done.stdout + done.stderr
    assert done.returncode != 0 and "UNAVAILABLE" in done.stderr, done.stderr[-2000:]

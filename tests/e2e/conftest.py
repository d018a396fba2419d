"""End-to-end tests run DAGs whose ``apply`` tasks are sessions of the shared Spark Connect engine:
the tests' own server is started once for the session (``stack_settings`` stops it at the end),
also for DAG runs that no ``cdclake run`` starts (the bootstrap DAG's triggered table runs, the
reconcile DAG's catch-up)."""

from __future__ import annotations

import pytest


@pytest.fixture(scope="session", autouse=True)
def _engine_running(engine: str) -> str:
    return engine

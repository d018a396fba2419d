"""The reduced conformance matrix (:mod:`cdclake_dev.conformance`; ``make conformance`` runs the full
one): one seeded history (DML with primary-key changes, multi-statement transactions and a
TRUNCATE; then ALTERs: ADD COLUMN ... DEFAULT on a populated table, INT -> BIGINT, RENAME COLUMN,
a DECIMAL precision increase, with a MariaDB JSON column throughout) on the session's chain,
through the Avro connector run from its file (``include/stack/debezium/``). After each phase every table equals its source, value by value, and
nothing was quarantined."""

from __future__ import annotations

import pytest

from cdclake_dev.cli import conformance_dags
from cdclake_dev.conformance import REDUCED_CELLS, REDUCED_PHASES, Matrix, run_matrix

pytestmark = pytest.mark.e2e

SEED = 51


@pytest.fixture(scope="module")
def matrix(chain, stack_settings, schema_registry, tmp_path_factory) -> Matrix:
    result = run_matrix(
        stack_settings,
        cells=REDUCED_CELLS,
        phases=REDUCED_PHASES,
        seed=SEED,
        registry_url=schema_registry,
        work=tmp_path_factory.mktemp("conformance"),
        dags=conformance_dags(),
        rows=20,
        ops=24,
    )
    print("\n" + result.table())
    return result


@pytest.mark.parametrize("cell", REDUCED_CELLS)
def test_every_phase_leaves_the_cell_equal_to_its_source(matrix: Matrix, cell: str) -> None:
    assert matrix.complete, matrix.table()
    failing = {p: by_cell[cell] for p, by_cell in matrix.outcomes.items() if not by_cell[cell].ok}
    assert not failing, {
        p: [(t.table, t.failed, t.samples, t.quarantine_errors) for t in o.tables] for p, o in failing.items()
    }

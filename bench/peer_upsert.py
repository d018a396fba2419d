"""The peer baseline: pyiceberg's own ``Table.upsert`` of a batch already reduced to one final
row per key, plus a delete of the keys whose final event is a delete, in one transaction.

pyiceberg cannot order Debezium events itself, so it gets the easier input (the reduction done
for it, outside the timing). Prints one line ``BENCH_STAGE_RESULT <json>``: ``job_s`` (the
transaction), ``rows_updated`` and ``rows_inserted`` as pyiceberg reports them.
"""

from __future__ import annotations

import argparse
import json
import sys
import time


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="peer_upsert.py", description=__doc__.splitlines()[0])
    parser.add_argument("--table", required=True, help="namespace.table")
    parser.add_argument("--upserts", required=True, help="Parquet file of the final rows (table schema)")
    parser.add_argument("--deletes", required=True, help="JSON file: list of ids whose final event is a delete")
    args = parser.parse_args(argv)

    import pyarrow.parquet as pq
    from pyiceberg.expressions import In

    from cdclake.io.catalog import load_catalog
    from cdclake.settings import Settings

    table = load_catalog(Settings.from_env()).load_table(args.table)
    rows = pq.read_table(args.upserts).cast(table.schema().as_arrow())
    deletes = json.load(open(args.deletes))
    t0 = time.monotonic()
    with table.transaction() as tx:
        result = tx.upsert(rows, join_cols=["id"])
        if deletes:
            tx.delete(In("id", deletes))
    out = {
        "stage": "peer",
        "job_s": time.monotonic() - t0,
        "rows_updated": result.rows_updated,
        "rows_inserted": result.rows_inserted,
        "rows_deleted_keys": len(deletes),
    }
    print("BENCH_STAGE_RESULT " + json.dumps(out), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())

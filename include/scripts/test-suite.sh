#!/usr/bin/env bash
# The whole test suite (`make test`): two pytest processes side by side, each with its own
# session stacks (broker, Spark, catalog; the chain and Airflow for the second), on free ports:
#   local: unit, the top-level tests, integration
#   chain: end-to-end, and the integration file that starts processes of its own (spark-submit
#          jobs killed mid-commit), which balances the two
# `test-suite.sh --long` runs the long layer instead (`make test-long`).
# Most of the chain layer's time is spent waiting on Debezium, Kafka Connect and Airflow's
# processes, so the two overlap well on 2 cores (docs/development.md, "The test suite").
# Each layer's JUnit XML (per-test seconds) and the chain layer's log land in .test-results/.
# With arguments, one pytest process runs them instead: test-suite.sh tests/unit -k name
# CDCLAKE_TEST_SERIAL=1 runs the two layers one after the other.
set -uo pipefail
cd "$(dirname "$0")/../.."
PYTEST=(.venv/bin/python -m pytest)
OUT=.test-results
mkdir -p "$OUT"

# pytest's exit code 5 (no tests collected) is a failure, not a pass
verdict() {
    local name=$1 rc=$2
    if [ "$rc" -eq 5 ]; then
        echo "test suite: the $name layer collected no tests: failing" >&2
        return 1
    fi
    return "$rc"
}

# the long layer (`make test-long`, docs/development.md "The test suite"): the production
# topology, the benchmarks' smoke runs and the every-type Avro scenario; not in this suite,
# which keeps to its budget (issue 56)
AVRO_SCENARIO=tests/e2e/test_types_and_schema.py::test_every_type_through_avro_equals_json_and_alters_converge
LONG=(tests/production tests/integration/test_bench_smoke.py tests/integration/test_bench_maintenance_smoke.py
      "$AVRO_SCENARIO")
if [ "${1:-}" = "--long" ]; then
    "${PYTEST[@]}" "${LONG[@]}" --junitxml="$OUT/long.xml"
    verdict long $?
    exit $?
fi

if [ "$#" -gt 0 ]; then  # after --long: any other arguments are a selection
    "${PYTEST[@]}" "$@"
    verdict "selected" $?
    exit $?
fi

CHAIN_PATHS=(tests/e2e tests/integration/test_crash.py)
LOCAL=(tests --junitxml="$OUT/local.xml" --ignore=tests/production --ignore=tests/integration/test_bench_smoke.py
       --ignore=tests/integration/test_bench_maintenance_smoke.py)
for path in "${CHAIN_PATHS[@]}"; do LOCAL+=(--ignore="$path"); done
CHAIN=("${CHAIN_PATHS[@]}" --junitxml="$OUT/chain.xml" --deselect="$AVRO_SCENARIO")

if [ "${CDCLAKE_TEST_SERIAL:-}" = "1" ]; then
    "${PYTEST[@]}" "${LOCAL[@]}"
    verdict local $?
    local_rc=$?
    "${PYTEST[@]}" "${CHAIN[@]}"
    verdict chain $?
    chain_rc=$?
else
    started=$(date +%s)
    echo "test suite: the chain layer (e2e) runs beside this one; its log: $OUT/chain.log"
    "${PYTEST[@]}" "${CHAIN[@]}" >"$OUT/chain.log" 2>&1 &
    chain_pid=$!
    # Ctrl-C or a kill of this script interrupts the chain layer too, so that its fixtures stop
    # the processes they started
    trap 'kill -INT "$chain_pid" 2>/dev/null; wait "$chain_pid"; exit 130' INT TERM
    "${PYTEST[@]}" "${LOCAL[@]}"
    verdict local $?
    local_rc=$?
    echo "test suite: the local layer ended after $(($(date +%s) - started)) s; waiting for the chain layer"
    wait "$chain_pid"
    verdict chain $?
    chain_rc=$?
    trap - INT TERM
    echo
    echo "==================== the chain layer (e2e): $OUT/chain.log ===================="
    cat "$OUT/chain.log"
    echo "test suite: both layers ended after $(($(date +%s) - started)) s"
fi
echo "test suite: local layer exit $local_rc, chain layer exit $chain_rc"
[ "$local_rc" -eq 0 ] && [ "$chain_rc" -eq 0 ]

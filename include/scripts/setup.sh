#!/usr/bin/env bash
# Set up everything the project runs on, from a clean clone; idempotent and quick when done.
#   1. .venv        Python virtual environment with the pinned requirements (uv, from PyPI)
#   2. .jars/       JVM jars from Maven Central (include/jars/pom.xml): Spark side, Kafka side,
#                   Kafka Connect plugins (Debezium, Apicurio's converters), Iceberg REST catalog
#                   server, s3proxy, Apicurio Registry, Trino with its Iceberg connector (a reader
#                   of the tests' reader matrix; it runs on Java 24+, found by cdclake_dev.system)
#   3. Debian packages: MariaDB, Chromium, PostgreSQL (apt-get, when missing)
#   4. Airflow      metadata DB (SQLite) under the state dir, migrated
# Non-interactive; each step is skipped when its inputs did not change (stamp files).
set -euo pipefail
cd "$(dirname "$0")/../.."
ROOT=$PWD
UV_VERSION=0.13.8
PYTHON=${PYTHON:-python3}

say() { printf '[setup] %s\n' "$*"; }
# apt_install NAME PACKAGE...: install Debian packages (sudo unless root), non-interactively
apt_install() {
  local name=$1; shift
  say "installing $name (apt-get)"
  if [ "$(id -u)" -eq 0 ]; then SUDO=; else SUDO=sudo; fi
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq "$@" >/dev/null
}

# --- prerequisites ---------------------------------------------------------------------------
command -v java >/dev/null || { echo "java not found: install a Java 17 runtime" >&2; exit 1; }
command -v mvn >/dev/null || { echo "mvn not found: install Maven" >&2; exit 1; }
"$PYTHON" -c 'import sys; sys.exit(0 if sys.version_info >= (3, 10) else 1)' \
  || { echo "Python >= 3.10 required ($PYTHON)" >&2; exit 1; }

# --- 1. Python virtual environment -----------------------------------------------------------
if [ ! -x .venv/bin/python ]; then
  say "creating .venv"
  "$PYTHON" -m venv .venv
fi
if [ ! -x .venv/bin/uv ] || [ "$(.venv/bin/uv --version | cut -d' ' -f2)" != "$UV_VERSION" ]; then
  say "installing uv $UV_VERSION"
  .venv/bin/python -m pip --version >/dev/null 2>&1 || .venv/bin/python -m ensurepip >/dev/null
  .venv/bin/python -m pip install -q --disable-pip-version-check "uv==$UV_VERSION"
fi
want=$( (cat requirements.txt pyproject.toml; echo bytecode-1) | sha256sum | cut -d' ' -f1)
if [ "$(cat .venv/.requirements.sha 2>/dev/null)" != "$want" ]; then
  say "installing Python requirements (uv)"
  VIRTUAL_ENV=$ROOT/.venv .venv/bin/uv pip install -q -r requirements.txt
  VIRTUAL_ENV=$ROOT/.venv .venv/bin/uv pip install -q --no-deps -e .
  # Bytecode now, once: with PYTHONDONTWRITEBYTECODE set (CI images often set it) every Python
  # process (each Airflow task, each spark-submit driver) would otherwise compile Airflow, pandas,
  # pyarrow and pyiceberg from source again, about 2 s of CPU per process.
  say "compiling the virtual environment's bytecode"
  .venv/bin/python -m compileall -q -j 0 "$(.venv/bin/python -c 'import sysconfig; print(sysconfig.get_path("purelib"))')" >/dev/null \
    || say "some files did not compile (their packages compile them on import)"
  echo "$want" > .venv/.requirements.sha
else
  say "Python requirements up to date"
fi

# --- 2. JVM jars -------------------------------------------------------------------------------
want=$(cat include/jars/pom.xml include/jars/settings.xml | sha256sum | cut -d' ' -f1)
if [ "$(cat .jars/.pom.sha 2>/dev/null)" != "$want" ]; then
  say "fetching the Debezium MariaDB connector plugin (Maven)"
  rm -rf .jars/connect-plugins
  mkdir -p .jars
  mvn -B -s include/jars/settings.xml -f include/jars/pom.xml -P debezium \
    dependency:unpack@debezium-plugin -DoutputDirectory="$ROOT/.jars/connect-plugins" > .jars/maven-debezium.log 2>&1 \
    || { tail -40 .jars/maven-debezium.log >&2; exit 1; }
  [ -d .jars/connect-plugins/debezium-connector-mariadb ] \
    || { echo "the Debezium plugin was not unpacked into .jars/connect-plugins" >&2; exit 1; }
  say "fetching Apicurio's Kafka Connect converters (Maven)"
  mvn -B -s include/jars/settings.xml -f include/jars/pom.xml -P registry-converter \
    dependency:copy-dependencies -DoutputDirectory="$ROOT/.jars/connect-plugins/apicurio-registry-converter" \
    > .jars/maven-registry-converter.log 2>&1 \
    || { tail -40 .jars/maven-registry-converter.log >&2; exit 1; }
  say "fetching Apicurio Registry (Maven)"
  rm -rf .jars/registry
  mvn -B -s include/jars/settings.xml -f include/jars/pom.xml -P registry \
    dependency:unpack@registry-app -DoutputDirectory="$ROOT/.jars/registry" > .jars/maven-registry.log 2>&1 \
    || { tail -40 .jars/maven-registry.log >&2; exit 1; }
  compgen -G '.jars/registry/apicurio-registry-app-*-runner.jar' >/dev/null \
    || { echo "Apicurio Registry was not unpacked into .jars/registry" >&2; exit 1; }
  say "fetching Trino with its Iceberg connector (Maven)"
  rm -rf .jars/trino
  mvn -B -s include/jars/settings.xml -f include/jars/pom.xml -P trino \
    dependency:unpack@trino-server -DoutputDirectory="$ROOT/.jars/trino" > .jars/maven-trino.log 2>&1 \
    || { tail -40 .jars/maven-trino.log >&2; exit 1; }
  compgen -G '.jars/trino/lib/io.trino_trino-main-*.jar' >/dev/null \
    && compgen -G '.jars/trino/plugin/iceberg/io.trino_trino-iceberg-*.jar' >/dev/null \
    || { echo "Trino and its Iceberg connector were not unpacked into .jars/trino" >&2; exit 1; }
  for profile in spark kafka rest-catalog s3proxy; do
    say "fetching $profile jars (Maven)"
    rm -rf ".jars/$profile"
    mkdir -p .jars
    mvn -B -s include/jars/settings.xml -f include/jars/pom.xml -P "$profile" \
      dependency:copy-dependencies -DoutputDirectory="$ROOT/.jars/$profile" > ".jars/maven-$profile.log" 2>&1 \
      || { tail -40 ".jars/maven-$profile.log" >&2; exit 1; }
  done
  echo "$want" > .jars/.pom.sha
else
  say "jars up to date"
fi

# Kafka Connect finds its plugins by Java's ServiceLoader (`plugin.discovery=service_load`) instead
# of scanning every class of every plugin jar at each start (6-9 s of a worker's start here).
# Debezium's jars carry the manifests; Apicurio's converters do not: Kafka's own tool
# (connect-plugin-path sync-manifests, KIP-898) writes them into a shim jar beside them.
if ! compgen -G '.jars/connect-plugins/apicurio-registry-converter/connect-plugin-path-shim-*.jar' >/dev/null; then
  say "writing the Connect plugins' ServiceLoader manifests (connect-plugin-path sync-manifests)"
  java -cp "$ROOT/.jars/kafka/*" org.apache.kafka.tools.ConnectPluginPath sync-manifests \
    --plugin-path "$ROOT/.jars/connect-plugins" > .jars/connect-plugin-path.log 2>&1 \
    || { tail -40 .jars/connect-plugin-path.log >&2; exit 1; }
fi

# --- 3. MariaDB (Debian package) for the real source chain -------------------------------------
if ! command -v mariadbd >/dev/null && [ ! -x /usr/sbin/mariadbd ]; then
  apt_install MariaDB mariadb-server mariadb-client
else
  say "MariaDB installed"
fi

# --- 3b. Chromium (Debian package) for the browser tests (Playwright drives it; tests/e2e/test_monitor.py)
if ! command -v chromium >/dev/null; then
  apt_install Chromium chromium
else
  say "Chromium installed"
fi

# --- 3c. PostgreSQL (Debian package) for the production parts (cdclake_dev.parts.postgres: catalog and
# Airflow metadata DBs); any version, the newest under /usr/lib/postgresql is used
if ! compgen -G '/usr/lib/postgresql/*/bin/initdb' >/dev/null; then
  apt_install PostgreSQL postgresql
else
  say "PostgreSQL installed"
fi

# --- 4. Airflow metadata DB -----------------------------------------------------------------------
.venv/bin/python - <<'PY'
from cdclake_dev.cli import ensure_airflow_db
from cdclake.settings import Settings
ensure_airflow_db(Settings.from_env())
PY
say "done"

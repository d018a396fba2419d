#!/bin/sh
# docker-compose.yaml's PostgreSQL: the second database, the Iceberg catalog's (the REST catalog
# server's JDBC catalog), owned by the user `iceberg` whose password is ICEBERG_DB_PASSWORD (.env).
# The local topology makes the same database with cdclake_dev.parts.postgres.Postgres.ensure_database.
set -eu
psql -v ON_ERROR_STOP=1 --username "$POSTGRES_USER" --dbname "$POSTGRES_DB" \
  -v pw="$ICEBERG_DB_PASSWORD" <<'SQL'
CREATE USER iceberg WITH PASSWORD :'pw';
CREATE DATABASE iceberg OWNER iceberg;
SQL

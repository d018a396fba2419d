#!/bin/sh
# docker-compose.yaml's PostgreSQL: the databases of the Iceberg catalog (the REST catalog server's
# JDBC catalog; user `iceberg`, password ICEBERG_DB_PASSWORD of .env) and of the schema registry
# (user `registry`, REGISTRY_DB_PASSWORD). The local topology makes the first with
# cdclake_dev.parts.postgres.Postgres.ensure_database; its registry keeps its schemas in an H2 file.
set -eu
psql -v ON_ERROR_STOP=1 --username "$POSTGRES_USER" --dbname "$POSTGRES_DB" \
  -v pw="$ICEBERG_DB_PASSWORD" <<'SQL'
CREATE USER iceberg WITH PASSWORD :'pw';
CREATE DATABASE iceberg OWNER iceberg;
SQL
# the schema registry's database (service schema-registry), owned by `registry`
psql -v ON_ERROR_STOP=1 --username "$POSTGRES_USER" --dbname "$POSTGRES_DB" \
  -v pw="$REGISTRY_DB_PASSWORD" <<'SQL'
CREATE USER registry WITH PASSWORD :'pw';
CREATE DATABASE registry OWNER registry;
SQL

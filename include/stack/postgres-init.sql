-- Second database on the production stack's PostgreSQL: the Iceberg JDBC catalog.
CREATE USER iceberg WITH PASSWORD 'iceberg';
CREATE DATABASE iceberg OWNER iceberg;

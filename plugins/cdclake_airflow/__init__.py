"""Airflow-facing pieces of cdclake: the table-DAG factory and its task callables.

Importing this package is cheap (no Spark, Kafka or Iceberg imports): DAG files import it at parse
time, and the task callables import the heavy libraries when they run.
"""

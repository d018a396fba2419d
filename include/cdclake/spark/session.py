"""The Spark session of the apply: the one place its settings are decided.

``spark-submit`` runs (the table DAG's ``apply`` task) get :func:`spark_conf` on the command
line; tests, the CLI and benchmarks build a local session with :func:`build_session`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from cdclake.settings import Settings, spark_jars

if TYPE_CHECKING:
    from pyspark.sql import SparkSession


def spark_conf(settings: Settings) -> dict[str, str]:
    """Spark settings every apply job runs with (catalog, UTC session time zone, small shuffles)."""
    conf = dict(settings.spark_catalog_conf())
    conf.update(
        {
            # Debezium's Timestamp/MicroTimestamp are UTC wall-clock values; read them in UTC
            "spark.sql.session.timeZone": "UTC",
            "spark.sql.shuffle.partitions": "8",
            "spark.sql.adaptive.enabled": "true",
            "spark.ui.showConsoleProgress": "false",
        }
    )
    return conf


def build_session(settings: Settings, app_name: str = "cdclake") -> SparkSession:
    """A local SparkSession (``settings.spark_master``) with the project's jars and
    :func:`spark_conf`.

    Raises:
        FileNotFoundError: the jars were not fetched yet (run ``make setup``).
    """
    from pyspark.sql import SparkSession

    builder = (
        SparkSession.builder.master(settings.spark_master)
        .appName(app_name)
        .config("spark.jars", ",".join(str(j) for j in spark_jars()))
        .config("spark.ui.enabled", "false")
        .config("spark.driver.memory", "2g")
    )
    for key, value in spark_conf(settings).items():
        builder = builder.config(key, value)
    return builder.getOrCreate()

"""Fixtures of the integration tests beyond the suite's (``tests/conftest.py``)."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from dataclasses import dataclass

import pytest

from cdclake.settings import Settings

REST_BUCKET = "lake"
REST_REGION = "us-east-1"


@dataclass(frozen=True)
class RestLake:
    """A REST catalog of the tests' own: Iceberg's REST catalog server over a SQLite ``JdbcCatalog``,
    its warehouse on s3proxy (bucket :data:`REST_BUCKET`). The one catalog in which cdclake keeps
    format v3 tables (:mod:`cdclake.model.format_version`).

    Attributes:
        settings: the tests' settings with this catalog (catalog name ``v3_lake``), S3 keys included,
            registered on the shared SparkSession.
        s3_endpoint: ``http://127.0.0.1:<port>`` of s3proxy (path-style).
        access_key: the S3 access key id.
        secret_key: the S3 secret key.
    """

    settings: Settings
    s3_endpoint: str
    access_key: str
    secret_key: str

    @property
    def catalog_name(self) -> str:
        return self.settings.catalog_name

    @property
    def rest_uri(self) -> str:
        return self.settings.catalog_uri

    def s3_properties(self) -> dict[str, str]:
        """The catalog properties of S3 access (pyiceberg's and Iceberg's names)."""
        return {
            "s3.endpoint": self.s3_endpoint,
            "s3.access-key-id": self.access_key,
            "s3.secret-access-key": self.secret_key,
            "s3.path-style-access": "true",
            "client.region": REST_REGION,
        }


@pytest.fixture(scope="session")
def rest_lake(tmp_path_factory: pytest.TempPathFactory, stack_settings: Settings, spark) -> Iterator[RestLake]:
    """s3proxy and the REST catalog server (about 10 s to start, two JVMs of at most 512 MiB and
    1 GiB heap), started by the first test that asks; the catalog is registered on the shared
    SparkSession as ``v3_lake`` (no other test uses that name). Both are stopped at the end."""
    from cdclake.spark.session import set_catalog
    from cdclake_dev.parts.rest_catalog import RestCatalogServer
    from cdclake_dev.parts.s3 import S3Proxy
    from cdclake_dev.process import free_port

    work = tmp_path_factory.mktemp("rest-lake")
    access_key, secret_key = "cdclake-v3", uuid.uuid4().hex
    s3 = S3Proxy(work / "s3", free_port(), access_key, secret_key)
    rest: RestCatalogServer | None = None
    try:
        s3.start()
        s3.ensure_bucket(REST_BUCKET)
        rest = RestCatalogServer(
            work / "rest",
            free_port(),
            jdbc_uri=f"jdbc:sqlite:{work / 'rest-catalog.db'}",
            jdbc_user="rest",
            jdbc_password="rest",
            warehouse=f"s3://{REST_BUCKET}/v3/",
            s3_endpoint=s3.endpoint,
            s3_access_key=access_key,
            s3_secret_key=secret_key,
            region=REST_REGION,
        )
        rest.start()
        settings = stack_settings.model_copy(update={"catalog_name": "v3_lake"}).with_catalog(
            {"type": "rest", "uri": rest.uri, "warehouse": rest.warehouse}
        )
        lake = RestLake(settings, s3.endpoint, access_key, secret_key)
        lake = RestLake(settings.with_catalog(lake.s3_properties()), s3.endpoint, access_key, secret_key)
        set_catalog(spark, lake.settings)
        yield lake
    finally:
        if rest is not None:
            rest.stop()
        s3.stop()

"""The production parts on one machine, one module each: a launcher that starts the part on
loopback, says when it is ready and stops it again, with every file under a folder its caller
passes.

* :mod:`~cdclake_dev.parts.postgres`: Debian's PostgreSQL (the newest ``/usr/lib/postgresql/<major>``),
  the JDBC catalog's and Airflow's metadata database; SCRAM passwords, ``fsync=off``.
* :mod:`~cdclake_dev.parts.s3`: s3proxy 4.1 (``.jars/s3proxy``), the S3 API over a local folder
  (``filesystem-nio2``).
* :mod:`~cdclake_dev.parts.rest_catalog`: Iceberg's REST catalog server (``.jars/rest-catalog``, the
  ``RESTCatalogServer`` test fixture of Iceberg 1.11) over a ``JdbcCatalog`` in PostgreSQL, its
  data and metadata files written through ``S3FileIO``.
* :mod:`~cdclake_dev.parts.registry`: Apicurio Registry 2.6 (``.jars/registry``), the schema registry
  of the Avro chain (Confluent-compatible API), in-memory storage.
* :mod:`~cdclake_dev.parts.spark_cluster`: a Spark standalone master and one worker from the pip
  ``pyspark`` package.
* :mod:`~cdclake_dev.parts.airflow`: Airflow 3's ``scheduler``, ``dag-processor``, ``triggerer``
  and ``api-server`` as processes of their own, driven through the REST API.

A reader, not a production part, lives beside them: :mod:`cdclake_dev.trino` starts Trino 476
(``.jars/trino``, on a Java 24+ runtime found by :func:`cdclake_dev.system.java_at_least`) with an
Iceberg catalog over the REST catalog, for the reader matrix.

Every process is a :class:`~cdclake_dev.process.Daemon`: it runs in a session (process group) of
its own, ``stop()`` ends the whole group (SIGTERM, then SIGKILL after the timeout), and its pid
file in the part's folder lets a second launcher on the same folder find it running (``start()``
returns at once) and stop it. PostgreSQL is started and stopped by its own ``pg_ctl``. Secrets
(passwords, the S3 secret key) reach the processes through files of mode 0600 or their
environment, never their command line, and are not logged.
"""

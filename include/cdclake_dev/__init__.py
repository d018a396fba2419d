"""The local tooling of cdclake: what a developer, the tests and the benchmarks run on one
machine, apart from the runtime package :mod:`cdclake` (which never imports it; import-linter
keeps that).

* :mod:`~cdclake_dev.process`: the one process supervisor (spawn, pid file, readiness, group stop).
* :mod:`~cdclake_dev.stack`: the Kafka broker (KRaft, optional SASL/SCRAM listener).
* :mod:`~cdclake_dev.engine`: the shared Spark Connect server.
* :mod:`~cdclake_dev.chain`: the real source chain: MariaDB and Kafka Connect with Debezium.
* :mod:`~cdclake_dev.airflow_env`: the local Airflow's environment and connections.
* :mod:`~cdclake_dev.warm_airflow`: the test suite's warm ``airflow dags test`` (a forking server).
* :mod:`~cdclake_dev.parts`: the production parts (PostgreSQL, s3proxy, REST catalog, Spark
  standalone, Airflow's processes, Apicurio Registry), one module each.
* :mod:`~cdclake_dev.production`, :mod:`~cdclake_dev.production_demo`: the production topology on
  one machine and its demo.
* :mod:`~cdclake_dev.cli`: the ``cdclake`` command (:mod:`~cdclake_dev.views`: its text views).
"""

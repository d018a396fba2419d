# Images of the production topology (docker-compose.yaml). One file, three targets:
#   jars     the pinned jars of include/jars/pom.xml, fetched by Maven (Spark side: Iceberg
#            runtime, iceberg-aws-bundle for S3FileIO, the Kafka source, the JDBC drivers)
#   airflow  Airflow 3.3 + the pinned requirements (pyspark, pyiceberg, confluent-kafka, the
#            providers) + Java 17 + the Spark jars: its workers drive Spark (spark-submit in
#            client mode for the `submit` engine; Spark Connect sessions for `connect`)
#   spark    Spark 4.1.3 + the same jars, for the Spark Connect server (the shared engine);
#            the master and workers run the stock image (executors fetch jars from the driver)
# The project is copied to /opt/cdclake; docker-compose.yaml mounts the config files over it.
FROM maven:3.9-eclipse-temurin-17 AS jars
WORKDIR /build
COPY include/jars/ include/jars/
RUN mvn -B -q -s include/jars/settings.xml -f include/jars/pom.xml -P spark \
      dependency:copy-dependencies -DoutputDirectory=/build/.jars/spark

FROM apache/airflow:3.3.2-python3.11 AS airflow
USER root
RUN apt-get update -qq && apt-get install -y -qq --no-install-recommends openjdk-17-jre-headless \
    && rm -rf /var/lib/apt/lists/*
ENV JAVA_HOME=/usr/lib/jvm/java-17-openjdk-amd64
USER airflow
COPY --chown=airflow requirements.txt /opt/cdclake/requirements.txt
RUN pip install --no-cache-dir -r /opt/cdclake/requirements.txt
COPY --chown=airflow . /opt/cdclake
COPY --from=jars --chown=airflow /build/.jars /opt/cdclake/.jars
RUN pip install --no-cache-dir --no-deps -e /opt/cdclake
ENV PYTHONPATH=/opt/cdclake/plugins

FROM apache/spark:4.1.3-scala2.13-java17-python3-ubuntu AS spark
COPY --from=jars /build/.jars/spark /opt/cdclake/.jars/spark

"""The connector's transaction topic (Debezium's ``<topic.prefix>.transaction``, written with
``provide.transaction.metadata=true``): its ``END`` records (:class:`~cdclake.model.transactions.TransactionEnd`)."""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

from cdclake.errors import ConfigError, SchemaError, UnknownSchemaIdError
from cdclake.io.kafka import read_partition
from cdclake.model.snapshot import metadata_document
from cdclake.model.transactions import TransactionEnd

if TYPE_CHECKING:
    from cdclake.io.kafka import KafkaClients
    from cdclake.model.plan import TransactionRange

log = logging.getLogger(__name__)


def read_transaction_ends(kafka: KafkaClients, source: TransactionRange) -> list[TransactionEnd]:
    """The ``END`` records of ``source``, by partition and offset. A record that is not
    transaction metadata is skipped with a warning naming its topic, partition and offset: the
    transaction whose ``END`` it may have been waits, as one whose ``END`` is not written yet.

    Raises:
        ConfigError: Avro records and no schema registry (:func:`~cdclake.model.snapshot.metadata_document`).
        TimeoutError: see :func:`~cdclake.io.kafka.read_partition`.
    """
    found: list[TransactionEnd] = []
    messages = (
        msg
        for p, end in sorted(source.end.items())
        if source.start.get(p, end) < end
        for msg in read_partition(kafka, source.topic, p, source.start[p], end, group_id="cdclake-transactions")
    )
    for msg in messages:
        value, offset = msg.value(), msg.offset() or 0
        if value is None:
            continue
        try:
            doc = metadata_document(value, kafka.schema_lookup, "transaction metadata records")
            end = TransactionEnd.from_value(doc, offset)
        except ConfigError:  # Avro without a registry, or its config is wrong: not a record's fault
            raise
        except (ValueError, TypeError, KeyError, SchemaError, UnknownSchemaIdError) as e:
            log.warning(
                "topic %s partition %s offset %d: not a transaction metadata record, skipped: %s",
                source.topic,
                msg.partition(),
                offset,
                e,
            )
            continue
        if end is not None:
            found.append(end)
    return found

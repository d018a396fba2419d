"""The project's domain errors. Each names what is wrong and where."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from cdclake.envelope import KafkaCoordinates


class CdcLakeError(Exception):
    """Base of every error this project raises on purpose."""


class BadRecordError(CdcLakeError):
    """A Kafka record that cannot be applied. The message names topic, partition and offset."""

    def __init__(self, where: KafkaCoordinates, reason: str) -> None:
        self.where = where
        self.reason = reason
        super().__init__(f"bad record at {where}: {reason}")


class BadBatchError(CdcLakeError):
    """A batch holds records that cannot be applied; nothing was committed, offsets stay put.

    ``records`` lists ``(topic, partition, offset, reason)`` for the first bad records found.
    """

    def __init__(self, records: list[tuple[str, int, int, str]], total: int) -> None:
        self.records = records
        self.total = total
        lines = "\n".join(
            f"  topic {t!r} partition {p} offset {o}: {r}" for t, p, o, r in records
        )
        more = f"\n  ... and {total - len(records)} more" if total > len(records) else ""
        super().__init__(
            f"{total} record(s) cannot be applied; nothing was committed and the committed "
            f"offsets did not move:\n{lines}{more}"
        )


class OffsetsOutOfRangeError(CdcLakeError):
    """The committed offsets are below the topic's low watermark: events were deleted by
    retention before they were applied. The remedy is a re-snapshot (the bootstrap DAG)."""


class ConcurrentRunError(CdcLakeError):
    """The table's committed offsets are not the ones this run started from: another run
    committed in between. The run commits nothing."""


class SchemaError(CdcLakeError):
    """The events' schema cannot be mapped to, or does not fit, the Iceberg table."""


class PositionOrderError(CdcLakeError):
    """Positions of a batch are not comparable (binlog basename or server changed)."""

"""Which configured tables a command or a DAG run takes: the one check of the table names an
operator gives (``cdclake status``/``maintain``, the ``tables`` Param of the DAGs over many
tables)."""

from __future__ import annotations

from collections.abc import Sequence

from cdclake.errors import ConfigError
from cdclake.model.config import TableConfig


def select_tables(
    tables: Sequence[TableConfig], names: Sequence[str] | None, *, among: str = "in the table config"
) -> list[TableConfig]:
    """The tables of ``tables`` named ``names``, in the order given (a name given twice counts
    once); all of ``tables``, in their order, when ``names`` is empty or ``None``.

    Args:
        tables: the tables to choose from: the table config's, or the ones a DAG takes.
        names: table names (:attr:`~cdclake.model.config.TableConfig.name`).
        among: what ``tables`` are, as the error message says it (``in the table config``).

    Raises:
        ConfigError: a name that is not one of ``tables`` (the message lists them).
    """
    if not names:
        return list(tables)
    by_name = {t.name: t for t in tables}
    unknown = sorted(set(names) - set(by_name))
    if unknown:
        raise ConfigError(f"no table(s) {unknown} {among}; configured: {sorted(by_name)}")
    return [by_name[n] for n in dict.fromkeys(names)]

"""MySQL literal text read into the value the source stores (pure): the text of a column default
as Debezium's DDL parser passes it in ``defaultValueExpression`` (string literals unquoted,
``b'101'`` as ``101``), read by the column's type. :mod:`cdclake.model.defaults` turns the values
into Spark SQL typed to the column's Iceberg type.

Sources of the rules: MySQL 8.0 Reference Manual, "String Literals" (quotes, escapes and
introducers), "Hexadecimal Literals", "Bit-Value Literals", "Date and Time Literals", "The TIME
Type", "The YEAR Type", "Fractional Seconds in Time Values" (rounding), "The ENUM Type", "The SET
Type", "The BINARY and VARBINARY Types" (0x00 padding).

A text that is not a literal of the type, or whose value the type cannot hold, raises
:class:`LiteralError`; a zero date (``0000-00-00``) raises :class:`ZeroDate`.
"""

from __future__ import annotations

import datetime as dt
import re
from decimal import ROUND_HALF_UP, Decimal, InvalidOperation

_NUMBER = re.compile(r"^[+-]?(\d+(\.\d*)?|\.\d+)([eE][+-]?\d+)?$")
_HEX = re.compile(r"^(?:0x([0-9a-fA-F]*)|[xX]'([0-9a-fA-F]*)')$")
_BITSTR = re.compile(r"^(?:0b([01]*)|[bB]'([01]*)')$")
_INTRODUCER = re.compile(r"^_[A-Za-z0-9]+(?=['\"])")
_QUOTED = re.compile(r"""^(?:'(?:[^'\\]|''|\\.)*'|"(?:[^"\\]|""|\\.)*")$""", re.DOTALL)
_MYSQL_ESCAPES = {"0": "\0", "b": "\b", "n": "\n", "r": "\r", "t": "\t", "Z": "\x1a"}
_DATE = re.compile(r"^(\d{4})-(\d{1,2})-(\d{1,2})$|^(\d{4})(\d{2})(\d{2})$")
_DATETIME = re.compile(r"^(\d{4})-(\d{1,2})-(\d{1,2})(?:[ T](\d{1,2}):(\d{1,2})(?::(\d{1,2})(?:\.(\d*))?)?)?$")
_TIME = re.compile(r"^([+-])?(?:(\d+) )?(\d+):(\d{1,2})(?::(\d{1,2})(?:\.(\d*))?)?$")
_TIME_DIGITS = re.compile(r"^([+-])?(\d{1,7})(?:\.(\d*))?$")
_MAX_TIME_US = (838 * 3600 + 59 * 60 + 59) * 1_000_000


class LiteralError(ValueError):
    """The text is not a literal of the type this version converts, or its value does not fit
    the type; the message says which, with the text as a DDL writes it."""


class ZeroDate(LiteralError):
    """The text is a zero date (``0000-00-00``, ``0000-00-00 00:00:00``), which no date type
    represents.

    Attributes:
        what: the literal as the message names it (``DATE '0000-00-00'``).
    """

    def __init__(self, what: str) -> None:
        super().__init__(f"{what} is a zero date")
        self.what = what


# --- text ----------------------------------------------------------------------------------------


def unquote(text: str) -> str:
    """A complete MySQL string literal (``'it''s'``, ``"a\\nb"``, ``_utf8mb4'x'``) -> its value;
    any other text as it is."""
    text = _INTRODUCER.sub("", text, count=1)
    if not _QUOTED.match(text):
        return text
    quote, body = text[0], text[1:-1]
    out: list[str] = []
    i = 0
    while i < len(body):
        ch = body[i]
        if ch == "\\" and i + 1 < len(body):
            nxt = body[i + 1]
            out.append(_MYSQL_ESCAPES.get(nxt, nxt))
            i += 2
        elif ch == quote and i + 1 < len(body) and body[i + 1] == quote:
            out.append(quote)
            i += 2
        else:
            out.append(ch)
            i += 1
    return "".join(out)


def ddl_text(expression: str) -> str:
    """A default as a DDL would write it (quoted unless it is a number, a hex or bit value,
    ``TRUE``, ``FALSE``, ``NULL``, an expression or already quoted), for messages."""
    if _QUOTED.match(expression) or _NUMBER.match(expression) or _HEX.match(expression) or _BITSTR.match(expression):
        return expression
    if expression.upper() in ("TRUE", "FALSE", "NULL") or expression.startswith("("):
        return expression
    return "'" + expression.replace("'", "''") + "'"


# --- numbers -------------------------------------------------------------------------------------


def bits_value(text: str) -> int | None:
    """``0x41``, ``X'41'``, ``b'101'``, ``0b101`` -> the unsigned number; else ``None``."""
    m = _HEX.match(text)
    if m is not None:
        digits = m.group(1) if m.group(1) is not None else m.group(2)
        return int(digits, 16) if digits else 0
    m = _BITSTR.match(text)
    if m is not None:
        digits = m.group(1) if m.group(1) is not None else m.group(2)
        return int(digits, 2) if digits else 0
    return None


def number(text: str) -> Decimal:
    """A numeric literal -> its exact value (``TRUE`` 1, ``FALSE`` 0, hex and bit values unsigned).

    Raises:
        LiteralError: not a number.
    """
    upper = text.strip().upper()
    if upper in ("TRUE", "FALSE"):
        return Decimal(1 if upper == "TRUE" else 0)
    bits = bits_value(text.strip())
    if bits is not None:
        return Decimal(bits)
    value = unquote(text).strip()
    if not _NUMBER.match(value):
        raise LiteralError(f"{ddl_text(text)} is not a number this version converts")
    return Decimal(value)


def round_half_up(value: Decimal, scale: int) -> Decimal:
    """``value`` rounded half away from zero to ``scale`` fraction digits (MySQL's rounding of
    exact values).

    Raises:
        LiteralError: more digits than the decimal context holds.
    """
    try:
        return value.quantize(Decimal(1).scaleb(-scale), rounding=ROUND_HALF_UP)
    except InvalidOperation as e:
        raise LiteralError(f"{value} does not fit the column") from e


def plain(value: Decimal) -> str:
    """``value`` as plain decimal text, without exponent (``-0`` as ``0``)."""
    text = format(value, "f")
    return text[1:] if text.startswith("-") and value == 0 else text


def decimal_text(value: Decimal, precision: int | None, scale: int) -> str:
    """The text of ``value`` in a ``DECIMAL(precision, scale)`` column (rounded to the scale).

    Raises:
        LiteralError: more digits than the precision.
    """
    rounded = round_half_up(value, scale)
    if precision is not None and len(rounded.as_tuple().digits) > precision and rounded != 0:
        raise LiteralError(f"{plain(rounded)} has more digits than DECIMAL({precision},{scale})")
    return plain(rounded)


def year(text: str) -> int:
    """A YEAR literal -> the year: ``1``-``69`` as 2001-2069, ``70``-``99`` as 1970-1999.

    Raises:
        LiteralError: the zero year (``0``, ``00``: 0000, or 2000 when written as a string), a
            year outside 1901..2155, not a number.
    """
    value = unquote(text).strip()
    n = int(round_half_up(number(text), 0))
    if n == 0:
        raise LiteralError(f"YEAR {ddl_text(text)} is the zero year 0000 (or 2000 when written as a string)")
    if 1 <= n <= 69:
        return n + 2000
    if 70 <= n <= 99:
        return n + 1900
    if not 1901 <= n <= 2155:
        raise LiteralError(f"YEAR {value} is out of MySQL's range 1901..2155")
    return n


# --- ENUM and SET --------------------------------------------------------------------------------


def _enum_member(value: str, members: list[str]) -> str | None:
    if value in members:
        return value
    folded = [m for m in members if m.casefold() == value.casefold()]
    return folded[0] if folded else None


def enum_value(text: str, members: list[str] | None) -> str:
    """An ENUM literal -> the value as the enumeration ``members`` spell it (as written when the
    members are not known).

    Raises:
        LiteralError: not one of the members.
    """
    value = unquote(text)
    if members is None:
        return value
    member = _enum_member(value, members)
    if member is None:
        raise LiteralError(f"{ddl_text(text)} is not one of the ENUM values {members}")
    return member


def set_value(text: str, members: list[str] | None) -> str:
    """A SET literal -> its members in the enumeration's order, as it spells them (as written
    when the members are not known).

    Raises:
        LiteralError: an item that is not one of the members.
    """
    value = unquote(text)
    if members is None or value == "":
        return value
    chosen: set[str] = set()
    for item in value.split(","):
        member = _enum_member(item, members)
        if member is None:
            raise LiteralError(f"{item!r} of {ddl_text(text)} is not one of the SET members {members}")
        chosen.add(member)
    return ",".join(m for m in members if m in chosen)


# --- dates and times -----------------------------------------------------------------------------


def date_value(text: str) -> dt.date:
    """A DATE literal (``YYYY-MM-DD`` or ``YYYYMMDD``; a time part is dropped) -> the date.

    Raises:
        ZeroDate: ``0000-00-00``.
        LiteralError: not such a literal, a zero month or day, not a valid date.
    """
    value = unquote(text).strip().split(" ")[0].split("T")[0]
    m = _DATE.match(value)
    if m is None:
        raise LiteralError(f"DATE {ddl_text(text)} is not a YYYY-MM-DD literal this version converts")
    y, month, day = (int(g) for g in (m.groups()[:3] if m.group(1) else m.groups()[3:]))
    if month == 0 or day == 0:
        if y == month == day == 0:
            raise ZeroDate(f"DATE {ddl_text(text)}")
        raise LiteralError(f"DATE {ddl_text(text)} has a zero month or day, not representable")
    try:
        return dt.date(y, month, day)
    except ValueError as e:
        raise LiteralError(f"DATE {ddl_text(text)} is not a valid date: {e}") from e


def _fraction_us(digits: str | None, fsp: int) -> int:
    """Fractional-second digits rounded half up to ``fsp`` digits, in microseconds (may be 10^6)."""
    if not digits:
        return 0
    rounded = round_half_up(Decimal("0." + digits), fsp)
    return int(rounded * 1_000_000)


def datetime_value(text: str, fsp: int, *, millis: bool) -> dt.datetime:
    """A DATETIME or TIMESTAMP literal (``YYYY-MM-DD[ HH:MM:SS[.f]]``) -> the moment, its fraction
    rounded to ``fsp`` digits, then truncated to milliseconds when ``millis``.

    Raises:
        ZeroDate: ``0000-00-00 00:00:00``.
        LiteralError: not such a literal, a zero month or day, not a valid moment.
    """
    value = unquote(text).strip()
    m = _DATETIME.match(value)
    if m is None:
        raise LiteralError(f"{ddl_text(text)} is not a YYYY-MM-DD HH:MM:SS literal this version converts")
    y, month, day, hour, minute, second = (int(g or 0) for g in m.groups()[:6])
    if month == 0 or day == 0:
        if y == month == day == hour == minute == second == 0 and not (m.group(7) or "").strip("0"):
            raise ZeroDate(ddl_text(text))
        raise LiteralError(f"{ddl_text(text)} has a zero month or day, not representable")
    try:
        moment = dt.datetime(y, month, day, hour, minute, second)
    except ValueError as e:
        raise LiteralError(f"{ddl_text(text)} is not a valid date and time: {e}") from e
    moment += dt.timedelta(microseconds=_fraction_us(m.group(7), fsp))
    if millis:
        moment = moment.replace(microsecond=moment.microsecond // 1000 * 1000)
    return moment


def time_us(text: str, fsp: int, *, millis: bool) -> int:
    """A TIME literal (``[-][D ]HH:MM[:SS[.f]]`` or ``[-]HHMMSS[.f]``) -> signed microseconds, its
    fraction rounded to ``fsp`` digits, then truncated to milliseconds when ``millis``.

    Raises:
        LiteralError: not such a literal, minutes or seconds above 59, outside
            -838:59:59..838:59:59.
    """
    value = unquote(text).strip()
    m = _TIME.match(value)
    if m is not None:
        sign, days, hours, minutes, seconds, fraction = m.groups()
        if int(minutes) > 59 or int(seconds or 0) > 59:
            raise LiteralError(f"TIME {ddl_text(text)} has minutes or seconds above 59")
        total = (int(days or 0) * 24 + int(hours)) * 3600 + int(minutes) * 60 + int(seconds or 0)
    else:
        m = _TIME_DIGITS.match(value)
        if m is None:
            raise LiteralError(f"TIME {ddl_text(text)} is not a [-][D ]HH:MM:SS literal this version converts")
        sign, digits, fraction = m.groups()
        digits = digits.zfill(6)
        h, mi, s = int(digits[:-4]), int(digits[-4:-2]), int(digits[-2:])
        if mi > 59 or s > 59:
            raise LiteralError(f"TIME {ddl_text(text)} has minutes or seconds above 59")
        total = h * 3600 + mi * 60 + s
    micros = total * 1_000_000 + _fraction_us(fraction, fsp)
    if millis:
        micros = micros // 1000 * 1000
    if micros > _MAX_TIME_US:
        raise LiteralError(f"TIME {ddl_text(text)} is out of MySQL's range -838:59:59..838:59:59")
    return -micros if sign == "-" else micros


# --- bytes and bits ------------------------------------------------------------------------------


def binary_value(text: str, binary_length: int | None) -> bytes:
    """A BINARY/VARBINARY/BLOB literal (``0x..``, ``X'..'``, ``b'..'``, or text: its UTF-8
    bytes) -> the bytes the source stores: padded with zero bytes to ``binary_length`` (the n of
    a BINARY(n) column; ``None`` for the others).

    Raises:
        LiteralError: longer than BINARY(n).
    """
    stripped = text.strip()
    n = bits_value(stripped)
    if n is not None:
        m = _HEX.match(stripped)
        digits = (m.group(1) if m.group(1) is not None else m.group(2)) if m else None
        if digits is not None:
            data = bytes.fromhex(digits if len(digits) % 2 == 0 else "0" + digits)
        else:
            data = n.to_bytes((n.bit_length() + 7) // 8, "big") if n else b""
    else:
        data = unquote(text).encode("utf-8")
    if binary_length is not None:
        if len(data) > binary_length:
            raise LiteralError(f"{ddl_text(text)} is longer than BINARY({binary_length})")
        data = data.ljust(binary_length, b"\0")
    return data


def bit_value(text: str, width: int | None) -> bytes:
    """A BIT(n) literal (Debezium's binary digits, ``b'101'`` arriving as ``101``; or ``0x..``,
    ``b'..'``, decimal digits) -> its ceil(n/8) bytes, big-endian.

    Raises:
        LiteralError: not a bit value, ``width`` (n) unknown, or a value that does not fit.
    """
    stripped = unquote(text).strip()
    n = bits_value(stripped)
    if n is None:
        if re.fullmatch(r"[01]+", stripped):  # Debezium writes b'101' as 101
            n = int(stripped, 2)
        elif re.fullmatch(r"\d+", stripped):
            n = int(stripped)
        else:
            raise LiteralError(f"BIT {ddl_text(text)} is not a bit value this version converts")
    if width is None:
        raise LiteralError(f"BIT {ddl_text(text)}: the column's length (n of BIT(n)) is not known")
    if n >= 2**width:
        raise LiteralError(f"BIT {ddl_text(text)} does not fit BIT({width})")
    return n.to_bytes((width + 7) // 8, "big")

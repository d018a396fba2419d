"""The table config's validation errors as lines a person reads (pure): the line in the file,
the table by its name, the key, what is wrong, the near key of an unknown one and what a missing
one is for (:func:`config_problems`, used by :func:`cdclake.model.config.load_tables`)."""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, get_args

import yaml
from pydantic import BaseModel, ValidationError

from cdclake.model.hints import near_match


@dataclass(frozen=True)
class ConfigShape:
    """The models of a config file: ``root`` (the file), ``defaults`` (its ``defaults:`` mapping)
    and ``table`` (one table entry), so that a key that belongs to a table alone is told apart."""

    root: type[BaseModel]
    defaults: type[BaseModel]
    table: type[BaseModel]


def yaml_tree(text: str) -> yaml.Node | None:
    """The file's YAML node tree (it knows the line of every key), or ``None``."""
    try:
        return yaml.compose(text, Loader=yaml.SafeLoader)
    except yaml.YAMLError:
        return None


def config_problems(error: ValidationError, raw: Any, tree: yaml.Node | None, shape: ConfigShape) -> list[str]:
    """Each of ``error``'s problems with the table config ``raw`` (the file's YAML, loaded) as one
    line a person reads: its line in the file (when ``tree``, the file's YAML nodes, tells), the
    table by its name, the key, and what is wrong, with the near key for an unknown one and what a
    missing one is for, e.g. ``line 9, table 'products': unknown key 'primary_keys'; did you mean
    'primary_key'?``. A missing key an unknown key is near is left out (one typo, one line);
    pydantic's alternatives of one value (``bad_records_tolerance``: a count or ``all``) are one
    line."""
    found: dict[tuple[tuple[str | int, ...], str], _Problem] = {}
    for err in error.errors(include_url=False):
        problem = _locate(err, raw, tree, shape)
        ident = (problem.keys, problem.kind if problem.kind in ("missing", "extra_forbidden") else "value")
        if ident in found:  # another alternative of a union
            found[ident].alternatives.append(_should(err["msg"]))
        else:
            found[ident] = problem
    problems = sorted(found.values(), key=lambda p: p.line or 0)  # as the file reads
    suggested = {(p.keys[:-1], p.near) for p in problems if p.kind == "extra_forbidden" and p.near}
    return [p.text() for p in problems if not (p.kind == "missing" and (p.keys[:-1], p.keys[-1]) in suggested)]


class _Problem:
    """One problem of :func:`config_problems`: where (``keys``, the path of keys and list indexes
    in the file; ``line``, 1-based) and what (``kind``, pydantic's error type)."""

    def __init__(
        self,
        keys: tuple[str | int, ...],
        line: int | None,
        kind: str,
        raw: Any,
        err: Mapping[str, Any],
        shape: ConfigShape,
    ):
        self.keys, self.line, self.kind, self.raw, self.shape = keys, line, kind, raw, shape
        self.input = err["input"]
        self.alternatives = [_should(err["msg"])]
        self.near: str | None = None
        self.message = str(err["msg"]).removeprefix("Value error, ")
        self.model = _model_at(keys[:-1], shape) if keys else shape.root
        if kind == "extra_forbidden" and keys and isinstance(keys[-1], str) and self.model is not None:
            self.near = near_match(keys[-1], self.model.model_fields)

    def owner(self) -> tuple[str, tuple[str | int, ...]]:
        """Whose key it is (a table by its name, ``defaults``, a discover pattern, the file: ``""``)
        and the keys left within it."""
        keys = self.keys
        if len(keys) >= 2 and keys[0] == "tables" and isinstance(keys[1], int):
            entries = self.raw.get("tables") if isinstance(self.raw, dict) else None
            entry = entries[keys[1]] if isinstance(entries, list) and keys[1] < len(entries) else None
            name = entry.get("name") if isinstance(entry, dict) else None
            return (f"table {name!r}" if isinstance(name, str) else f"table entry {keys[1] + 1}"), keys[2:]
        if len(keys) >= 2 and keys[0] == "discover" and isinstance(keys[1], int):
            return f"discover pattern {keys[1] + 1}", keys[2:]
        if len(keys) >= 1 and keys[0] == "defaults":
            return "defaults", keys[1:]
        return "", keys

    def text(self) -> str:
        owner, keys = self.owner()
        key = _dotted(keys)
        where = ", ".join(w for w in (f"line {self.line}" if self.line else "", owner) if w)
        what = self._what(key or ("the entry" if owner else "the file"), keys)
        return f"{where}: {what}" if where else what

    def _what(self, key: str, keys: tuple[str | int, ...]) -> str:
        if self.kind == "extra_forbidden" and keys:
            if self.model is self.shape.defaults and keys[-1] in self.shape.table.model_fields:
                return f"unknown key {key!r}: each table gives its own {keys[-1]}, it cannot be a default"
            hint = f"; did you mean {_dotted((*keys[:-1], self.near))!r}?" if self.near else ""
            return f"unknown key {key!r}{hint}"
        if self.kind == "missing" and keys:
            field = self.model.model_fields.get(str(keys[-1])) if self.model is not None else None
            about = _first_sentence(field.description) if field is not None and field.description else ""
            return f"missing required key {key!r}" + (f" ({about})" if about else "")
        if self.kind == "value_error":
            return self.message if not keys or self.message.startswith(str(keys[-1])) else f"{key}: {self.message}"
        shown = f", not {self.input!r}" if isinstance(self.input, str | int | float | bool | None) else ""
        return f"{key} {', or '.join(dict.fromkeys(self.alternatives))}{shown}"


def _locate(err: Mapping[str, Any], raw: Any, tree: yaml.Node | None, shape: ConfigShape) -> _Problem:
    """Where in the file ``err`` (one of pydantic's errors) is: its keys, set apart from the tags
    pydantic adds for the alternatives of a union (``constrained-int``, ``literal['all']``), and
    the line of the deepest key found in ``tree``."""
    loc, kind = tuple(err["loc"]), str(err["type"])
    keys: list[str | int] = []
    data, node = raw, tree
    line = None  # a problem of the whole file has none
    for i, seg in enumerate(loc):
        if isinstance(seg, int) and isinstance(data, list) and seg < len(data):
            data = data[seg]
            node = node.value[seg] if isinstance(node, yaml.SequenceNode) and seg < len(node.value) else None
            line = node.start_mark.line + 1 if node is not None else line
        elif isinstance(data, dict) and seg in data:
            data = data[seg]
            pair = [(k, v) for k, v in node.value if k.value == str(seg)] if isinstance(node, yaml.MappingNode) else []
            node = pair[-1][1] if pair else None  # the last of a repeated key is the one loaded
            line = pair[-1][0].start_mark.line + 1 if pair else line
        elif isinstance(seg, str) and (
            kind == "missing" and i == len(loc) - 1 or seg in _fields_at(tuple(keys), shape)
        ):
            data, node = None, None  # a key the entry has from the defaults, or does not have
        else:
            break  # a union's tag
        keys.append(seg)
    return _Problem(tuple(keys), line, kind, raw, err, shape)


def _model_at(keys: tuple[str | int, ...], shape: ConfigShape) -> type[BaseModel] | None:
    """The model of the mapping at ``keys`` in the file (``None``: not a model's, or not known)."""
    model: type[BaseModel] | None = shape.root
    for key in keys:
        if isinstance(key, int) or model is None:
            continue  # an item of a list keeps the list's item model
        field = model.model_fields.get(key)
        model = shape.defaults if key == "defaults" else _model_in(field.annotation) if field is not None else None
    return model


def _fields_at(keys: tuple[str | int, ...], shape: ConfigShape) -> Mapping[str, Any]:
    model = _model_at(keys, shape)
    return model.model_fields if model is not None else {}


def _model_in(annotation: Any) -> type[BaseModel] | None:
    """The model a field's type holds (``tuple[TableConfig, ...]``, ``MaintenancePolicy | None``)."""
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return annotation
    for arg in get_args(annotation):
        found = _model_in(arg)
        if found is not None:
            return found
    return None


def _dotted(keys: tuple[str | int | None, ...]) -> str:
    """``maintenance.retain_last``, ``primary_key[1]``."""
    out = ""
    for key in keys:
        out += f"[{key}]" if isinstance(key, int) else f".{key}" if out else str(key)
    return out


def _should(msg: str) -> str:
    """Pydantic's ``Input should be a valid dictionary or instance of X`` as ``should be a valid
    dictionary``."""
    msg = re.sub(r"^(Input|String|Value|Dictionary|List|Tuple) should", "should", str(msg))
    return re.sub(r" or instance of \w+", "", msg)


def _first_sentence(doc: str) -> str:
    """A field description's first sentence, without reST markup."""
    text = " ".join(doc.replace("``", "").split())
    return re.split(r"(?<=[a-z0-9>)\]])\.(\s|$)", text, maxsplit=1)[0]

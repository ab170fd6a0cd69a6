"""Read TOML files and validate them with pydantic, reporting file, key path and line.

``tomllib`` keeps no positions, so :class:`KeyLines` scans the source once and maps every
key path (tables, arrays of tables, dotted and inline keys) to the line that defines it.
"""

from __future__ import annotations

import math
import re
import tomllib
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any, TypeVar

import pydantic

from onboard.base.errors import ConfigError, Problem
from onboard.base.nesting import MAX_NESTING, TOO_DEEP, nesting

KeyPath = tuple[str | int, ...]
ProblemAt = Callable[[KeyPath, str], Problem]
M = TypeVar("M", bound=pydantic.BaseModel)

_KEY = r"""(?:[A-Za-z0-9_-]+|"(?:[^"\\]|\\.)*"|'[^']*')"""
_DOTTED = rf"{_KEY}(?:\s*\.\s*{_KEY})*"
_HEADER = re.compile(rf"^\s*(\[\[?)\s*({_DOTTED})\s*\]\]?")
_ASSIGN = re.compile(rf"^\s*({_DOTTED})\s*=")
_INLINE_KEY = re.compile(rf"[{{,]\s*({_DOTTED})\s*=")
_TOML_POSITION = re.compile(r"\(at line (\d+), column \d+\)")


def split_dotted(text: str) -> tuple[str, ...]:
    """``a."b c".d`` -> ``("a", "b c", "d")``."""
    parts = re.findall(_KEY, text)
    return tuple(p[1:-1] if p[:1] in "\"'" else p for p in parts)


def format_key(path: Sequence[str | int]) -> str:
    """A key path as a user would write it: ``actions."wait for cue".stimuli``."""
    out = ""
    for part in path:
        if isinstance(part, int):
            out += f"[{part}]"
            continue
        name = part if re.fullmatch(r"[A-Za-z0-9_-]+", part) else _quoted(part)
        out += f".{name}" if out else name
    return out


def _quoted(key: str) -> str:
    """A TOML basic string: quotes, backslashes and control characters escaped, one line."""
    escaped = key.replace("\\", "\\\\").replace('"', '\\"')
    return '"' + "".join(c if c.isprintable() else f"\\u{ord(c):04X}" for c in escaped) + '"'


def line_in(path: Path, key: str) -> int | None:
    """The line of the dotted ``key`` (``fleet.agent``) in the TOML file at ``path``, or of
    its deepest prefix the file defines; None when the file cannot be read."""
    try:
        return KeyLines(path.read_text(encoding="utf-8")).line_of(key.split("."))
    except (OSError, UnicodeDecodeError):
        return None


class KeyLines:
    """Maps key paths of one TOML source to the (1-based) line that defines them."""

    def __init__(self, source: str) -> None:
        self._lines: dict[KeyPath, int] = {}
        self._array_counts: dict[KeyPath, int] = {}
        self._scan(source)

    def line_of(self, path: Sequence[str | int]) -> int | None:
        """The line of the deepest prefix of ``path`` that the source defines."""
        key = tuple(path)
        for end in range(len(key), 0, -1):
            if key[:end] in self._lines:
                return self._lines[key[:end]]
        return None

    def _scan(self, source: str) -> None:
        table: KeyPath = ()
        in_multiline = False
        for number, line in enumerate(source.splitlines(), start=1):
            if in_multiline:
                in_multiline = _toggles_multiline(line, in_multiline)
                continue
            header = _HEADER.match(line)
            if header:
                table = self._enter_table(header.group(1) == "[[", header.group(2), number)
                continue
            assign = _ASSIGN.match(line)
            if assign:
                path = table + split_dotted(assign.group(1))
                self._lines.setdefault(path, number)
                for inner in _INLINE_KEY.finditer(line, assign.end()):
                    self._lines.setdefault(path + split_dotted(inner.group(1)), number)
            in_multiline = _toggles_multiline(line, in_multiline)

    def _enter_table(self, is_array: bool, dotted: str, number: int) -> KeyPath:
        path = self._with_indices(split_dotted(dotted))
        if is_array:
            index = self._array_counts.get(path, 0)
            self._array_counts[path] = index + 1
            self._lines.setdefault(path, number)
            path = (*path, index)
        self._lines.setdefault(path, number)
        return path

    def _with_indices(self, names: tuple[str, ...]) -> KeyPath:
        """Insert the current index after each prefix that is an array of tables."""
        path: KeyPath = ()
        for name in names:
            path = (*path, name)
            count = self._array_counts.get(path)
            if count is not None and name != names[-1]:
                path = (*path, count - 1)
        return path


def _toggles_multiline(line: str, inside: bool) -> bool:
    count = line.count('"""') + line.count("'''")
    return inside if count % 2 == 0 else not inside


def read_toml(path: Path, error: type[ConfigError] = ConfigError) -> tuple[dict[str, Any], str]:
    """Parse a TOML file; a missing file or a syntax error becomes ``error`` with its line."""
    try:
        source = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise error([Problem(path, "", None, "file not found")]) from None
    except (OSError, UnicodeDecodeError) as exc:
        raise error([Problem(path, "", None, f"cannot read: {exc}")]) from exc
    return parse_toml(source, path, error), source


def parse_toml(
    source: str, path: Path | str, error: type[ConfigError] = ConfigError
) -> dict[str, Any]:
    """Parse TOML text from ``path``; a syntax error (with its line) or nesting deeper than
    MAX_NESTING becomes ``error``."""
    try:
        data = tomllib.loads(source)
    except tomllib.TOMLDecodeError as exc:
        found = _TOML_POSITION.search(str(exc))
        line = int(found.group(1)) if found else None
        message = _TOML_POSITION.sub("", str(exc)).strip()
        raise error([Problem(path, "", line, f"TOML syntax error: {message}")]) from exc
    except RecursionError:  # tomllib recurses per nested array or inline table
        raise error([Problem(path, "", None, TOO_DEEP)]) from None
    if nesting(data) > MAX_NESTING:
        raise error([Problem(path, "", None, TOO_DEEP)])
    infinite = list(_not_finite(data))
    if infinite:
        lines = KeyLines(source)
        raise error([
            Problem(path, format_key(key), lines.line_of(key), f"{value}: must be a finite number")
            for key, value in infinite
        ])  # fmt: skip
    return data


def _not_finite(data: dict[str, Any]) -> Iterator[tuple[KeyPath, float]]:
    """Each inf or nan in ``data`` with its key path: no onboard file has a use for one (a
    limit, deadline, speed or distance of inf is none), so every file is refused with it."""
    stack: list[tuple[KeyPath, Any]] = [((), data)]
    while stack:
        key, value = stack.pop()
        if isinstance(value, float) and not math.isfinite(value):
            yield key, value
        elif isinstance(value, dict):
            stack += [((*key, k), v) for k, v in reversed(value.items())]
        elif isinstance(value, list):
            stack += [((*key, i), v) for i, v in reversed(list(enumerate(value)))]


def validation_problems(
    path: Path, lines: KeyLines, exc: pydantic.ValidationError
) -> list[Problem]:
    """One :class:`Problem` per pydantic error, with the line of its key path."""
    problems = []
    for err in exc.errors(include_url=False):
        loc = tuple(p for p in err["loc"] if isinstance(p, str | int))
        # pydantic appends the tagged-union member name; it is not a key in the file
        loc = tuple(p for p in loc if not (isinstance(p, str) and p.startswith("function-")))
        message = err["msg"]
        if err["type"] == "extra_forbidden":
            message = "unknown key (check its spelling)"
        problems.append(Problem(path, format_key(loc), lines.line_of(loc), message))
    return problems


def load_model(
    path: Path,
    model: type[M],
    error: type[ConfigError] = ConfigError,
    context: dict[str, Any] | None = None,
    prepare: Callable[[dict[str, Any]], dict[str, Any]] | None = None,
) -> tuple[M, KeyLines]:
    """Read ``path`` and validate it as ``model``; every problem is reported at once."""
    data, source = read_toml(path, error)
    lines = KeyLines(source)
    if prepare is not None:
        data = prepare(data)
    try:
        return model.model_validate(data, context=context), lines
    except pydantic.ValidationError as exc:
        raise error(validation_problems(path, lines, exc)) from exc

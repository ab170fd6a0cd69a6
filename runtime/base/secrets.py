"""One helper that keeps a secret (the LLM API key) out of everything recorded or stored."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

__all__ = ["MASK", "scrub"]

MASK = "***"
#: shorter values are not scrubbed: masking every "ab" in a recording would corrupt it
MIN_SECRET = 4


def scrub(value: Any, secrets: Iterable[str | None]) -> Any:
    """``value`` with every secret replaced by ``***``: strings, and the strings inside
    dicts (keys too), lists and tuples; anything else as it is."""
    found = sorted({s for s in secrets if s and len(s) >= MIN_SECRET}, key=len, reverse=True)
    return _scrub(value, found) if found else value


def _scrub(value: Any, secrets: list[str]) -> Any:
    if isinstance(value, str):
        for secret in secrets:
            if secret in value:
                value = value.replace(secret, MASK)
        return value
    if isinstance(value, dict):
        return {_scrub(k, secrets): _scrub(v, secrets) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return type(value)(_scrub(v, secrets) for v in value)
    return value

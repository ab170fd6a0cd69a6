"""``onboard code check FILE``: a generated program against the sandbox's allow-list."""

from __future__ import annotations

from pathlib import Path

from onboard.base.errors import UsageError
from onboard.replan.allowlist import check
from onboard.replan.names import API_NAMES

__all__ = ["check_command"]


def check_command(path: Path) -> int:
    """Prints ``FILE:LINE: refused: REASON`` per refusal and returns 1, else ``FILE: accepted``
    and 0. A file that cannot be read is a :class:`UsageError` (exit 2)."""
    try:
        source = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        reason = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)
        raise UsageError(f"{path}: cannot be read ({reason})") from exc
    refusals = check(source, API_NAMES)
    for refusal in refusals:
        print(f"{path}:{refusal.line}: refused: {refusal.reason}")
    if refusals:
        return 1
    print(f"{path}: accepted")
    return 0

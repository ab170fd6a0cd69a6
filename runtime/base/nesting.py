"""How deep a parsed file nests: parsers and validators recurse, so deep nesting is refused.

``tomllib`` and ``json`` recurse per level and raise RecursionError near Python's limit
(about 1000); a value just under it still makes pydantic, the secret scrubber and the
replay recurse. No onboard file needs more than a few levels, so every file is held to
:data:`MAX_NESTING` right after it is parsed.
"""

from __future__ import annotations

from typing import Any

__all__ = ["MAX_NESTING", "TOO_DEEP", "nesting"]

#: tables, arrays and objects inside each other; far above what any onboard file uses
MAX_NESTING = 64
TOO_DEEP = f"nested more than {MAX_NESTING} levels deep (tables, arrays or objects)"


def nesting(value: Any) -> int:
    """The depth of dicts and lists in ``value`` (a scalar: 0), without recursion."""
    deepest = 0
    stack: list[tuple[Any, int]] = [(value, 0)]
    while stack:
        item, depth = stack.pop()
        children = item.values() if isinstance(item, dict) else item
        if not isinstance(item, dict | list | tuple):
            continue
        depth += 1
        deepest = max(deepest, depth)
        if depth <= MAX_NESTING:  # deeper is already refused: stop counting
            stack.extend((child, depth) for child in children)
    return deepest

"""What every hardware driver shares: connect, close, and use as a context manager."""

from __future__ import annotations

from typing import Self

__all__ = ["Device"]


class Device:
    """``with driver:`` connects on entry and closes on exit, whatever happens inside."""

    def connect(self) -> None:
        raise NotImplementedError

    def close(self) -> None:
        raise NotImplementedError

    def __enter__(self) -> Self:
        self.connect()
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

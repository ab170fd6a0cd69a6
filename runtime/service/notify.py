"""sd_notify by hand: one datagram per state on the unix socket systemd names in
``NOTIFY_SOCKET`` (``READY=1``, ``WATCHDOG=1``, ``STOPPING=1``, ``WATCHDOG_USEC=``).

Without ``NOTIFY_SOCKET`` (not under systemd, or ``Type=simple``) every call does nothing.
A name starting with ``@`` is in Linux's abstract namespace (a leading NUL byte).
"""

from __future__ import annotations

import os
import socket

__all__ = ["Notifier", "watchdog_seconds"]


class Notifier:
    def __init__(self, address: str | None = None) -> None:
        address = address if address is not None else os.environ.get("NOTIFY_SOCKET")
        self._address: str | None = None
        self._socket: socket.socket | None = None
        if address:
            self._address = "\0" + address[1:] if address.startswith("@") else address
            self._socket = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM | socket.SOCK_CLOEXEC)

    @property
    def active(self) -> bool:
        return self._socket is not None

    def send(self, *states: str) -> bool:
        """Send ``states`` in one datagram; False when there is no socket or it refused
        (systemd gone: the service goes on, systemd's watchdog is what acts)."""
        if self._socket is None or self._address is None:
            return False
        try:
            self._socket.sendto("\n".join(states).encode(), self._address)
        except OSError:
            return False
        return True

    def close(self) -> None:
        if self._socket is not None:
            self._socket.close()
            self._socket = None


def watchdog_seconds() -> float | None:
    """systemd's watchdog timeout for this process (``WATCHDOG_USEC``, for ``WATCHDOG_PID``
    when that is set), in seconds; None when there is no watchdog."""
    usec = os.environ.get("WATCHDOG_USEC", "")
    pid = os.environ.get("WATCHDOG_PID", "")
    if not usec.isdigit() or int(usec) == 0:
        return None
    if pid and (not pid.isdigit() or int(pid) != os.getpid()):
        return None
    return int(usec) / 1e6

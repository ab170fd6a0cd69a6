"""Servers onboard starts from the command line (the stand-in, ``sim serve``): a port out of
range, a port in use or a host that does not resolve is one :class:`UsageError` line."""

from __future__ import annotations

import errno
import socket

from onboard.base.errors import UsageError

__all__ = ["check_listen", "check_port", "listen_error"]


def check_port(flag: str, port: int) -> int:
    """``port`` when it is one (0 picks a free one); else a UsageError naming ``flag``."""
    if not 0 <= port <= 65535:
        raise UsageError(f"{flag} {port}: not a port (0 to 65535; 0 picks a free one)")
    return port


def listen_error(what: str, host: str, ports: str, exc: OSError) -> UsageError:
    """What binding ``host:ports`` failed with, as one line."""
    if isinstance(exc, socket.gaierror):
        reason = f"host {host!r} does not resolve ({exc.strerror})"
    elif exc.errno == errno.EADDRINUSE:
        reason = "the port is in use (another server listens there)"
    elif exc.errno == errno.EACCES:
        reason = "permission denied (ports below 1024 need root)"
    else:
        reason = exc.strerror or str(exc)
    return UsageError(f"{what}: cannot listen on {host}:{ports}: {reason}")


def check_listen(what: str, host: str, ports: dict[str, int]) -> None:
    """Before anything is built: every port in range, ``host`` resolves, each port is free.

    ``ports`` maps each command-line flag to its port; a UsageError names what is wrong.
    """
    for flag, port in ports.items():
        check_port(flag, port)
    try:
        socket.getaddrinfo(host, None)
    except (socket.gaierror, UnicodeError) as exc:
        why = exc.strerror if isinstance(exc, socket.gaierror) else "not a host name"
        raise UsageError(f"{what}: cannot listen on {host}: host {host!r} does not resolve "
                         f"({why})") from exc  # fmt: skip
    for port in ports.values():
        if port == 0:
            continue
        try:
            with socket.create_server((host, port)):
                pass
        except OSError as exc:
            raise listen_error(what, host, str(port), exc) from exc

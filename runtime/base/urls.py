"""HTTP(S) URLs from robot.toml or the command line: one check, and their userinfo kept out
of everything printed or recorded.

``http://user:password@host/v1`` is a valid endpoint (httpx sends the userinfo as basic
auth), but the password is a secret like the API key: :func:`public_url` is the URL to
print, log or record, and :func:`url_secrets` what a scrubber hides.
"""

from __future__ import annotations

from urllib.parse import SplitResult, urlsplit

from onboard.base.secrets import MASK

__all__ = ["public_url", "url_problem", "url_secrets"]


def url_problem(url: str) -> str | None:
    """Why ``url`` is not an http(s) URL onboard can send to (None: it is): a scheme other
    than http(s), no host, a port out of range, a broken IPv6 address, a control character
    (a CR or LF would split the request line)."""
    if not url.isprintable() or any(c.isspace() for c in url):
        return "not a URL (it holds a space, a line break or another control character)"
    try:
        parts = urlsplit(url)
        parts.port  # noqa: B018 (raises ValueError when out of range or not a number)
    except ValueError as exc:
        return f"not a URL ({exc})"
    if parts.scheme not in ("http", "https") or not parts.hostname:
        return "not an http(s) URL"
    return None


def _userinfo(parts: SplitResult) -> str | None:
    netloc = parts.netloc
    return netloc.rpartition("@")[0] if "@" in netloc else None


def public_url(url: str) -> str:
    """``url`` with its userinfo (``user:password@``) shown as ``***@``."""
    try:
        parts = urlsplit(url)
    except ValueError:
        return url if "@" not in url else MASK
    if _userinfo(parts) is None:
        return url
    host = parts.netloc.rpartition("@")[2]
    return parts._replace(netloc=f"{MASK}@{host}").geturl()


def url_secrets(url: str | None) -> list[str]:
    """The userinfo of ``url`` and its password, for :func:`onboard.base.secrets.scrub`."""
    if not url:
        return []
    try:
        parts = urlsplit(url)
    except ValueError:
        return []
    userinfo = _userinfo(parts)
    return [s for s in (userinfo, parts.password) if s]

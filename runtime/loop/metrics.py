"""Prometheus metrics read from the records alone (the ``metrics`` extra: prometheus-client).

:class:`RecordMetrics` is a recorder subscriber, so what it counts is what the recordings
hold, and a recording can be counted again offline (:meth:`RecordMetrics.__call__` takes any
record). :func:`serve` puts a registry on an HTTP endpoint on loopback (``onboard up
--metrics PORT``). What each metric counts, by record kind (docs/recordings.md):

==========================================  ======================================================
``onboard_records_total{kind}``             every record
``onboard_llm_latency_seconds{purpose}``    a ``reply``'s ``latency`` (wall seconds of the HTTP
                                            exchange, retries included)
``onboard_decision_overhead_seconds``       from a ``reply`` to the ``transition`` it led to
                                            (reason ``plan``, no request between): the runtime's
                                            own time, parse, map and checks (``wall``, to 1 ms)
``onboard_llm_errors_total{kind}``          an ``error`` from the LLM: ``timeout`` (no answer
                                            in time), ``http`` (an error status), ``reply`` (an
                                            unusable reply: too big, not JSON, off its schema),
                                            ``refused`` (not asked: a budget spent), ``other``
``onboard_llm_skipped_total{purpose}``      a request not sent (``llm_skipped``: breaker open)
``onboard_reasks_total{check}``             a ``reask``, by the check that refused the proposal
                                            before it (``none``: the reply mapped to nothing)
``onboard_refinements_total``               a re-ask after the critic refused: ReAd's refinement
``onboard_mapping_refusals_total{reason}``  a clause the mapping refused (``refused`` of a
                                            ``mapping`` record's clause: near tie, threshold, ...)
``onboard_check_refusals_total{check}``     a ``check`` that said no (critic, legal, judge, ...)
``onboard_critic_vetoes_total``             a ``check`` by the critic that said no
``onboard_episodes_total{skill,finished}``  an ``end`` (a mission step's outcome: one episode)
``onboard_stops_total{signal}``             an ``end`` that a stop signal caused
==========================================  ======================================================
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from onboard.base.errors import MissingExtraError
from onboard.loop.recorder import Published, Subscriber

if TYPE_CHECKING:
    from wsgiref.simple_server import WSGIServer

    from prometheus_client import CollectorRegistry

__all__ = ["EXTRA", "RecordMetrics", "llm_error_kind", "serve"]

EXTRA = "pip install 'onboard[metrics]' (the metrics extra: prometheus-client)"
#: seconds: an LLM reply takes 0.1 s on loopback to tens of seconds on a loaded server
LATENCY_BUCKETS = (0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0)
#: seconds: the runtime's own part of a decision is milliseconds (bench/decision_loop.py)
#: (a scene skill's checks take a fresh look: a frame and the detector, tenths of a second)
OVERHEAD_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5)

_KINDS = (
    ("timeout", re.compile(r": no answer within ")),
    ("refused", re.compile(r": not asked, ")),
    ("http", re.compile(r": HTTP \d{3}\b")),
    ("reply", re.compile(r": (reply|not a chat completion)")),
)


def llm_error_kind(message: str) -> str:
    """What kind of LLM failure an ``error`` record's message says (ChatClient's wording)."""
    return next((kind for kind, pattern in _KINDS if pattern.search(message)), "other")


class RecordMetrics:
    """Prometheus metrics from records: subscribe it to one recorder (``recorder.subscribe``),
    or its :meth:`episode` to every recording of the process (``subscribe_every``)."""

    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        try:
            from prometheus_client import CollectorRegistry, Counter, Histogram
        except ImportError as exc:
            raise MissingExtraError(f"metrics need prometheus-client: {EXTRA}") from exc
        self.registry = registry or CollectorRegistry()
        r = self.registry
        self.records = Counter("onboard_records", "records written, by kind", ["kind"], registry=r)
        self.llm_latency = Histogram("onboard_llm_latency_seconds", "LLM reply latency",
                                     ["purpose"], buckets=LATENCY_BUCKETS, registry=r)  # fmt: skip
        self.overhead = Histogram("onboard_decision_overhead_seconds",
                                  "from an LLM reply to the action it led to",
                                  buckets=OVERHEAD_BUCKETS, registry=r)  # fmt: skip
        self.llm_errors = Counter("onboard_llm_errors", "LLM failures, by kind", ["kind"],
                                  registry=r)  # fmt: skip
        self.llm_skipped = Counter("onboard_llm_skipped", "LLM requests not sent (the "
                                   "breaker open)", ["purpose"], registry=r)  # fmt: skip
        self.reasks = Counter("onboard_reasks", "re-asks, by the check that refused",
                              ["check"], registry=r)  # fmt: skip
        self.refinements = Counter("onboard_refinements", "re-asks after the critic refused",
                                   registry=r)  # fmt: skip
        self.mapping_refusals = Counter("onboard_mapping_refusals", "clauses the mapping "
                                        "refused, by reason", ["reason"], registry=r)  # fmt: skip
        self.check_refusals = Counter("onboard_check_refusals", "checks that said no",
                                      ["check"], registry=r)  # fmt: skip
        self.critic_vetoes = Counter("onboard_critic_vetoes", "proposals the critic refused",
                                     registry=r)  # fmt: skip
        self.episodes = Counter("onboard_episodes", "episodes ended (mission steps)",
                                ["skill", "finished"], registry=r)  # fmt: skip
        self.stops = Counter("onboard_stops", "episodes a stop signal ended", ["signal"],
                             registry=r)  # fmt: skip
        self._own = _Episode(self)

    def __call__(self, published: Published) -> None:
        self._own(published)

    def count(self, record: Mapping[str, Any]) -> None:
        """Count one record of the one recording this counts (in its order)."""
        self._own.count(record)

    def episode(self) -> Subscriber:
        """A subscriber for one more recording, into these metrics: recordings written at
        once (an evaluation's threads) each need their own (``subscribe_every(m.episode)``),
        as a decision's overhead pairs a reply with the transition of the same episode."""
        return _Episode(self)


class _Episode:
    """What counting a recording remembers between its records."""

    def __init__(self, metrics: RecordMetrics) -> None:
        self.m = metrics
        self._skill = ""
        self._replied: float | None = None
        self._refused_by = "none"

    def __call__(self, published: Published) -> None:
        self.count(published.record)

    def count(self, record: Mapping[str, Any]) -> None:
        m = self.m
        kind = str(record.get("kind"))
        m.records.labels(kind).inc()
        wall = _seconds(record.get("wall"))
        if kind == "header":
            skill = record.get("skill")
            self._skill = str(skill.get("name", "")) if isinstance(skill, Mapping) else ""
        elif kind == "request":
            self._replied = None
        elif kind == "reply":
            latency = _seconds(record.get("latency"))
            if latency is not None:
                m.llm_latency.labels(str(record.get("purpose", ""))).observe(latency)
            self._replied = wall
        elif kind == "transition" and record.get("reason") == "plan":
            if self._replied is not None and wall is not None:
                m.overhead.observe(max(0.0, wall - self._replied))
            self._replied = None
        elif kind == "error" and record.get("source") == "llm":
            m.llm_errors.labels(llm_error_kind(str(record.get("message", "")))).inc()
        elif kind == "llm_skipped":
            m.llm_skipped.labels(str(record.get("purpose", ""))).inc()
        elif kind == "check" and record.get("ok") is False:
            check = str(record.get("check", ""))
            m.check_refusals.labels(check).inc()
            self._refused_by = check
            if check == "critic":
                m.critic_vetoes.inc()
        elif kind == "reask":
            m.reasks.labels(self._refused_by).inc()
            if self._refused_by == "critic":
                m.refinements.inc()
            self._refused_by = "none"
        elif kind == "mapping":
            for reason in _refusals(record):
                m.mapping_refusals.labels(reason).inc()
        elif kind == "end":
            m.episodes.labels(self._skill, str(bool(record.get("finished"))).lower()).inc()
            if record.get("signal") is not None:
                m.stops.labels(str(record["signal"])).inc()


def _seconds(value: Any) -> float | None:
    ok = isinstance(value, int | float) and not isinstance(value, bool)
    return float(value) if ok else None


def _refusals(record: Mapping[str, Any]) -> list[str]:
    mapping = record.get("mapping")
    clauses = (mapping if isinstance(mapping, Mapping) else record).get("clauses")
    return [
        str(c["refused"])
        for c in (clauses if isinstance(clauses, list) else [])
        if isinstance(c, Mapping) and c.get("refused") is not None
    ]


def serve(
    registry: CollectorRegistry, port: int, host: str = "127.0.0.1", *, name: str = "--metrics"
) -> WSGIServer:
    """Serve ``registry`` at ``http://host:port/metrics`` on a daemon thread (``port`` 0: a
    free one, ``server.server_port``); ``server.shutdown()`` stops it. ``name`` is where the
    port came from, for errors."""
    from prometheus_client import start_http_server

    from onboard.base.listen import check_port, listen_error

    check_port(name, port)
    try:
        server, _ = start_http_server(port, addr=host, registry=registry)
    except OSError as exc:
        raise listen_error(name, host, str(port), exc) from exc
    return server

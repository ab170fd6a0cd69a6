"""The seed's Tables II-V from code-task episodes: printed with rich, as JSON, and a PNG chart
of success per task and method (Pillow's ImageDraw).

One :class:`EpisodeRow` per episode (the harness, runtime/evaluation/code_eval.py, makes them).
``method`` is one of :data:`METHODS`; ``model`` labels what answered (the stand-in at some
competence, the control row: the stand-in at competence 1.0, the text-only SmolLM2, ...);
each (method, model) is one line of a table, models in the order they first appear.

- **Table II**: success per task of ReplanVLM (method ``full``), one line per model.
- **Table III**: SayCan, ProgPrompt and ReplanVLM per model.
- **Table IV**: the ablations: full, without internal, without external, without both.
- **Table V** (ReplanVLM only): internal errors detected and corrected, of those the
  stand-in planted (its log: ``planted``, ``internal_detected``, ``internal_corrected``
  per episode, each error attributed to the proposal it was planted in); of those detected,
  the ones the runtime's own checks caught (``internal_by_runtime``: the form, the
  allow-list, the dry run and the comparison, not the Inner Bot, which the stand-in answers
  itself, so that line is not graded by the model that planted the error); external errors
  detected and corrected, of the disturbances the twin logged that broke the task
  (``disturbance_broke``; ``external_detected``: the outer check, the goal's relations or
  the Extra Bot, said "not done" after it; ``external_corrected``: the task was done in the
  end).

Tables II-IV count undisturbed episodes only (``disturbed`` false; ``build_tables(...,
include_disturbed=True)`` counts all). A success cell is the share of that task's episodes
that passed the judge; the average is the mean over the tasks with episodes, as the seed
averages. Each table ends with the seed's own figures (GPT-4V), marked with where they were
measured: Table II has both its columns (real robots, simulation); Tables III, IV and V are
the seed's real-robot experiments (their ReplanVLM line is Table II's real-robot column).
"""

from __future__ import annotations

import io
import itertools
import json
import statistics
from collections.abc import Callable, Iterable, Sequence
from dataclasses import asdict, dataclass, field, fields
from typing import Any

from PIL import Image, ImageDraw, ImageFont
from rich.console import Console
from rich.table import Table

from onboard.base.errors import ConfigError, Problem

__all__ = [
    "ABLATIONS",
    "COMPARED",
    "METHODS",
    "EpisodeRow",
    "Line",
    "Rate",
    "ReportTable",
    "build_tables",
    "chart_png",
    "from_json",
    "orderings",
    "print_report",
    "to_json",
]

#: method -> its name in the tables
METHODS: dict[str, str] = {
    "full": "ReplanVLM",
    "no_internal": "ReplanVLM w/o internal",
    "no_external": "ReplanVLM w/o external",
    "no_both": "ReplanVLM w/o both",
    "progprompt": "ProgPrompt",
    "saycan": "SayCan",
}
#: Table IV's methods, in the seed's order (which it finds in decreasing success)
ABLATIONS = ("full", "no_internal", "no_external", "no_both")
#: Table III's methods, in the seed's order (increasing success)
COMPARED = ("saycan", "progprompt", "full")
#: the label of the seed's own figures
SEED = "seed paper (GPT-4V)"
#: where the seed measured each of its tables' figures
SIM, REAL = "sim", "real robot"
#: in %: ReplanVLM's simulated column of Table II; the others from Tables III and IV (real
#: robots; the seed's text gives 78.5% for "without external", its table's rows average 82.9%)
_SEED_SUCCESS: dict[str, tuple[int, ...]] = {
    "full": (100, 100, 90, 90, 100, 90, 90),
    "saycan": (50, 0, 0, 20, 0, 0, 0),
    "progprompt": (70, 0, 0, 50, 70, 20, 10),
    "no_internal": (90, 90, 100, 60, 90, 90, 90),
    "no_external": (90, 80, 100, 80, 80, 80, 70),
    "no_both": (90, 60, 90, 60, 80, 60, 40),
}
#: ReplanVLM's line in the seed's Tables III and IV (its real-robot column of Table II)
_SEED_FULL = (100, 90, 100, 80, 100, 90, 100)
_SEED_ERRORS = {  # Table V, in %: disturbances during grasping (external)
    "external detected": (100, 100, 90, 80, 100, 100, 100),
    "external corrected": (90, 80, 60, 60, 100, 80, 90),
}


@dataclass(frozen=True)
class EpisodeRow:
    """One episode of a code task. ``runs``: programs run on the robot; ``asks``: model
    requests; ``planted``: errors the stand-in planted (its log), ``internal_detected`` /
    ``internal_corrected`` of those; ``disturbed``: the twin's disturber acted,
    ``disturbance_broke``: what it did broke the task (the judge would have passed without
    it), ``external_detected``: the Extra Bot then said "not done", ``external_corrected``:
    the task was done in the end; ``seconds``: the episode's wall time."""

    task: int
    name: str
    method: str
    model: str
    trial: int
    success: bool
    runs: int = 0
    asks: int = 0
    internal_detected: int = 0
    internal_corrected: int = 0
    planted: int = 0
    internal_by_runtime: int = 0
    disturbed: bool = False
    disturbance_broke: bool = False
    external_detected: bool = False
    external_corrected: bool = False
    seconds: float = 0.0

    def __post_init__(self) -> None:
        if self.method not in METHODS:
            raise ValueError(f"method {self.method!r}: one of {', '.join(METHODS)}")
        if not (
            self.internal_corrected <= self.internal_detected <= self.planted
            and self.internal_by_runtime <= self.internal_detected
        ):
            raise ValueError(
                f"task {self.task} trial {self.trial}: internal corrected "
                f"{self.internal_corrected} (and by the runtime {self.internal_by_runtime}) "
                f"<= detected {self.internal_detected} <= planted {self.planted} does not hold"
            )


@dataclass(frozen=True)
class Rate:
    hits: int
    total: int

    @property
    def value(self) -> float | None:
        return self.hits / self.total if self.total else None


@dataclass(frozen=True)
class Line:
    """One line of a table: a (method, model) and one measure, per task. ``percent``
    holds the seed's figures (no counts behind them)."""

    label: str
    method: str
    model: str
    measure: str
    by_task: dict[int, Rate] = field(default_factory=dict)
    percent: dict[int, float] = field(default_factory=dict)

    def value(self, task: int) -> float | None:
        if task in self.percent:
            return self.percent[task] / 100.0
        rate = self.by_task.get(task)
        return rate.value if rate is not None else None

    def average(self, tasks: Iterable[int]) -> float | None:
        values = [v for t in tasks if (v := self.value(t)) is not None]
        return statistics.fmean(values) if values else None

    def cell(self, task: int, counts: bool) -> str:
        value = self.value(task)
        if value is None:
            return "-"
        rate = self.by_task.get(task)
        if counts and rate is not None:
            return f"{rate.hits}/{rate.total}"
        return f"{100 * value:.0f}%"

    def to_record(self, tasks: Sequence[int]) -> dict[str, Any]:
        by_task: dict[str, Any] = {}
        for t in tasks:
            if t in self.percent:
                by_task[str(t)] = {"percent": self.percent[t]}
            elif (r := self.by_task.get(t)) is not None:
                by_task[str(t)] = {"hits": r.hits, "total": r.total, "rate": r.value}
        return {
            "label": self.label,
            "method": self.method,
            "model": self.model,
            "measure": self.measure,
            "by_task": by_task,
            "average": self.average(tasks),
        }


@dataclass(frozen=True)
class ReportTable:
    number: str  # "II", "III", ...
    title: str
    tasks: tuple[int, ...]
    lines: list[Line]
    counts: bool = False  # cells as hits/total rather than percent

    def line(self, method: str, model: str, measure: str = "success") -> Line:
        return next(
            ln for ln in self.lines if (ln.method, ln.model, ln.measure) == (method, model, measure)
        )

    def rich(self) -> Table:
        table = Table(title=f"Table {self.number}: {self.title}")
        table.add_column("")
        for task in self.tasks:
            table.add_column(f"Task {task}", justify="right")
        table.add_column("Average", justify="right")
        model = None
        for ln in self.lines:
            if model is not None and ln.model != model:
                table.add_section()
            model = ln.model
            average = ln.average(self.tasks)
            avg = "-" if average is None else f"{100 * average:.1f}%"
            style = "dim" if ln.model == SEED else None
            table.add_row(ln.label, *(ln.cell(t, self.counts) for t in self.tasks), avg,
                          style=style)  # fmt: skip
        return table

    def to_record(self) -> dict[str, Any]:
        return {
            "number": self.number,
            "title": self.title,
            "tasks": list(self.tasks),
            "lines": [ln.to_record(self.tasks) for ln in self.lines],
        }


def _models(rows: Sequence[EpisodeRow]) -> list[str]:
    return list(dict.fromkeys(r.model for r in rows))


def _tasks(rows: Sequence[EpisodeRow]) -> tuple[int, ...]:
    return tuple(sorted({r.task for r in rows})) or tuple(range(1, 8))


def _success(rows: Sequence[EpisodeRow], method: str, model: str) -> Line | None:
    mine = [r for r in rows if r.method == method and r.model == model]
    if not mine:
        return None
    by_task = {
        t: Rate(sum(r.success for r in mine if r.task == t), sum(r.task == t for r in mine))
        for t in sorted({r.task for r in mine})
    }
    return Line(f"{METHODS[method]} · {model}", method, model, "success", by_task)


def _seed(method: str, values: Sequence[int], label: str | None = None) -> Line:
    percent = {t: float(v) for t, v in enumerate(values, 1)}
    return Line(label or f"{METHODS[method]} · {SEED}", method, SEED, "success", {}, percent)


def _success_table(
    number: str, title: str, rows: Sequence[EpisodeRow], methods: Sequence[str]
) -> ReportTable:
    lines = [
        line
        for model in _models(rows)
        for method in methods
        if (line := _success(rows, method, model)) is not None
    ]
    for method in methods:
        name = f"{METHODS[method]} · {SEED}"
        if number == "II":  # the seed's Table II has both columns
            lines.append(_seed(method, _SEED_FULL, f"{name}, {REAL}"))
            lines.append(_seed(method, _SEED_SUCCESS[method], f"{name}, {SIM}"))
        else:  # Tables III and IV: the seed's real-robot experiments
            values = _SEED_FULL if method == "full" else _SEED_SUCCESS[method]
            lines.append(_seed(method, values, f"{name}, {REAL}"))
    return ReportTable(number, title, _tasks(rows), lines)


Count = Callable[[EpisodeRow], int]


def _per_task(rows: Sequence[EpisodeRow], hits: Count, total: Count) -> dict[int, Rate]:
    """Per task: ``hits`` summed over its episodes, of ``total`` summed (tasks with none
    left out)."""
    out = {}
    for task in sorted({r.task for r in rows}):
        of_task = [r for r in rows if r.task == task]
        if (n := sum(total(r) for r in of_task)) > 0:
            out[task] = Rate(sum(hits(r) for r in of_task), n)
    return out


def _planted(row: EpisodeRow) -> int:
    return row.planted


def _broke(row: EpisodeRow) -> int:
    return int(row.disturbance_broke)


def _errors_table(rows: Sequence[EpisodeRow]) -> ReportTable:
    lines: list[Line] = []
    for model in _models(rows):
        mine = [r for r in rows if r.method == "full" and r.model == model]
        if not mine:
            continue
        measures = {
            "internal detected": _per_task(mine, lambda r: r.internal_detected, _planted),
            "of those, by the runtime's checks": _per_task(
                mine, lambda r: r.internal_by_runtime, lambda r: r.internal_detected
            ),
            "internal corrected": _per_task(mine, lambda r: r.internal_corrected, _planted),
            "external detected": _per_task(mine, lambda r: _broke(r) * r.external_detected, _broke),
            "external corrected": _per_task(
                mine, lambda r: _broke(r) * r.external_corrected, _broke
            ),
        }
        for measure, by_task in measures.items():
            lines.append(Line(f"{measure} · {model}", "full", model, measure, by_task))
    for measure, values in _SEED_ERRORS.items():
        percent = {t: float(v) for t, v in enumerate(values, 1)}
        lines.append(Line(f"{measure} · {SEED}, {REAL}", "full", SEED, measure, {}, percent))
    title = "error detection and correction, ReplanVLM"
    return ReportTable("V", title, _tasks(rows), lines, counts=True)


def build_tables(rows: Sequence[EpisodeRow], include_disturbed: bool = False) -> list[ReportTable]:
    """Tables II, III, IV and V of ``rows``."""
    calm = list(rows) if include_disturbed else [r for r in rows if not r.disturbed]
    return [
        _success_table("II", "success per task, ReplanVLM", calm, ("full",)),
        _success_table("III", "ReplanVLM against the baselines", calm, COMPARED),
        _success_table("IV", "ablations of the error correction", calm, ABLATIONS),
        _errors_table(rows),
    ]


def orderings(rows: Sequence[EpisodeRow], include_disturbed: bool = False) -> list[str]:
    """For each model, whether the seed's orderings of average success hold: full > w/o
    internal > w/o external > w/o both, and ReplanVLM > ProgPrompt > SayCan; one sentence
    each, naming the first pair that breaks it."""
    tables = build_tables(rows, include_disturbed)
    out = []
    for model in _models(rows):
        for table, order in ((tables[2], ABLATIONS), (tables[1], tuple(reversed(COMPARED)))):
            averages = []
            for method in order:
                line = next((ln for ln in table.lines if (ln.method, ln.model) ==
                             (method, model)), None)  # fmt: skip
                average = line.average(table.tasks) if line is not None else None
                if average is not None:
                    averages.append((method, average))
            if len(averages) < 2:
                continue
            said = " > ".join(f"{METHODS[m]} {100 * a:.1f}%" for m, a in averages)
            broken = next(
                ((a, b) for a, b in itertools.pairwise(averages) if a[1] <= b[1]),
                None,
            )
            if broken is None:
                out.append(f"{model}: {said}: holds")
            else:
                (m1, a1), (m2, a2) = broken
                out.append(f"{model}: {said}: does not hold ({METHODS[m1]} {100 * a1:.1f}% "
                           f"is not above {METHODS[m2]} {100 * a2:.1f}%)")  # fmt: skip
    return out


def print_report(
    rows: Sequence[EpisodeRow], console: Console | None = None, include_disturbed: bool = False
) -> None:
    console = console or Console()
    for table in build_tables(rows, include_disturbed):
        console.print(table.rich())
    for sentence in orderings(rows, include_disturbed):
        console.print(f"- {sentence}", highlight=False)


def to_json(rows: Sequence[EpisodeRow], include_disturbed: bool = False) -> str:
    """The episodes, the four tables' figures and the orderings, as one JSON document."""
    return json.dumps(
        {
            "episodes": [asdict(r) for r in rows],
            "tables": [t.to_record() for t in build_tables(rows, include_disturbed)],
            "orderings": orderings(rows, include_disturbed),
        },
        indent=1,
    )


def from_json(text: str, source: str = "<json>") -> list[EpisodeRow]:
    """The episodes of a :func:`to_json` document; a ConfigError naming ``source`` and the
    episode when it is not one."""
    try:
        episodes = json.loads(text)["episodes"]
    except (ValueError, TypeError, KeyError) as exc:
        raise ConfigError([Problem(source, "episodes", None, f"not a report: {exc}")]) from None
    names = {f.name for f in fields(EpisodeRow)}
    rows = []
    for i, episode in enumerate(episodes):
        try:
            if not isinstance(episode, dict) or set(episode) - names:
                raise ValueError(f"unknown keys {sorted(set(episode) - names)}")
            rows.append(EpisodeRow(**episode))
        except (TypeError, ValueError) as exc:
            raise ConfigError([Problem(source, f"episodes.{i}", None, str(exc))]) from None
    return rows


# -- the chart ---------------------------------------------------------------------------------

#: one colour per method, in METHODS' order
COLOURS = {
    "full": (31, 119, 180),
    "no_internal": (44, 160, 44),
    "no_external": (255, 127, 14),
    "no_both": (148, 103, 189),
    "progprompt": (140, 86, 75),
    "saycan": (214, 39, 40),
}
_MARGIN = (70, 50, 200, 60)  # left, top, right, bottom (px): axes, title, legend, labels


def chart_png(
    rows: Sequence[EpisodeRow],
    model: str | None = None,
    size: tuple[int, int] = (960, 540),
    include_disturbed: bool = False,
) -> bytes:
    """A grouped bar chart (PNG) of success per task and method for ``model`` (default: the
    first in ``rows``): a group per task and the average, a bar per method, a legend, axis
    labels."""
    calm = list(rows) if include_disturbed else [r for r in rows if not r.disturbed]
    model = model if model is not None else (_models(rows) or [""])[0]
    series = [
        (method, line) for method in METHODS if (line := _success(calm, method, model)) is not None
    ]
    tasks = _tasks(calm)
    width, height = size
    left, top, right, bottom = _MARGIN
    image = Image.new("RGB", size, "white")
    draw = ImageDraw.Draw(image)
    font = ImageFont.load_default(size=13)
    plot_w, plot_h = width - left - right, height - top - bottom
    y0 = top + plot_h
    for percent in range(0, 101, 20):  # the y axis: ticks and grid
        y = y0 - plot_h * percent / 100
        draw.line([(left, y), (left + plot_w, y)], fill=(225, 225, 225))
        draw.text((left - 8, y), f"{percent}%", fill="black", font=font, anchor="rm")
    draw.line([(left, top), (left, y0), (left + plot_w, y0)], fill="black", width=2)
    groups = [*(f"Task {t}" for t in tasks), "Average"]
    group_w = plot_w / len(groups)
    bar_w = group_w * 0.8 / max(len(series), 1)
    for g, label in enumerate(groups):
        x = left + g * group_w + group_w * 0.1
        for method, line in series:
            value = line.value(tasks[g]) if g < len(tasks) else line.average(tasks)
            if value is not None and value > 0:
                draw.rectangle(
                    [(x, y0 - plot_h * value), (x + bar_w - 1, y0 - 1)], fill=COLOURS[method]
                )
            x += bar_w
        centre = left + (g + 0.5) * group_w
        draw.text((centre, y0 + 8), label, fill="black", font=font, anchor="mt")
    draw.text((left + plot_w / 2, height - 18), "task", fill="black", font=font, anchor="mm")
    title = f"Success per task and method: {model}"
    draw.text((left + plot_w / 2, top / 2), title, fill="black", font=font, anchor="mm")
    axis = Image.new("RGB", (plot_h, 20), "white")  # the y label, turned a quarter
    ImageDraw.Draw(axis).text((plot_h / 2, 10), "success (%)", fill="black", font=font,
                              anchor="mm")  # fmt: skip
    image.paste(axis.rotate(90, expand=True), (8, top))
    lx, ly = left + plot_w + 20, top
    for method, _ in series:  # the legend
        draw.rectangle([(lx, ly), (lx + 14, ly + 14)], fill=COLOURS[method])
        draw.text((lx + 20, ly + 7), METHODS[method], fill="black", font=font, anchor="lm")
        ly += 22
    out = io.BytesIO()
    image.save(out, format="PNG")
    return out.getvalue()

"""The team evaluation's report: rich tables, the "claim holds?" column, the seed's Table 1,
the ablation, the controls, JSON, and a PNG like the seed's Figure 3 (Pillow).

**The claim** (per task level): ReAd-S and ReAd-J beat every baseline present on SR and ES
at equal or fewer NQ. A ReAd method *beats* a baseline when, on the cells' means rounded to
3 decimals, its SR is at least the baseline's, its ES at most the baseline's, its NQ at most
the baseline's, and it is strictly better on SR or on ES (a tie on both is not a beat). The
standard deviations are printed beside the means but not tested: with a few trials a
difference is not claimed significant. The claim *holds* at a level when every ReAd method
present beats every baseline present; "n/a" when either side is missing. Baselines are the
registered methods other than ReAd's, the single-step ablation and the disturbance-only
RoCo-L / RoCo-P.
"""

from __future__ import annotations

import io
import json
from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass
from typing import Any

from PIL import Image, ImageDraw, ImageFont
from rich.console import Console
from rich.table import Table

from onboard.base.errors import UsageError
from onboard.collab.evaluate import (
    ABLATION,
    ABLATION_LEVEL,
    ABLATION_TASK,
    BASELINE_EXCLUDED,
    DISTURB_METHODS,
    DISTURB_STEPS,
    READ_METHODS,
    Episode,
    Stat,
    Summary,
    summarize,
)

__all__ = [
    "Claim",
    "Control",
    "Report",
    "ablation_table",
    "beats",
    "claims",
    "controls",
    "disturbance_table",
    "figure_png",
    "main_table",
]

DIGITS = 3


@dataclass(frozen=True)
class Claim:
    task: str
    level: str
    #: None: not testable here (no ReAd method or no baseline)
    holds: bool | None
    detail: str


@dataclass(frozen=True)
class Control:
    """The controls at a task level for one ReAd method: SR with the trained critic, with a
    random critic, a random proposer with the trained critic, and the trained critic behind
    a proposer that ignores all feedback (the stand-in's control: the refused lines and the
    history do not reach it, so only re-asking and the critic's filter remain)."""

    task: str
    level: str
    method: str
    hardest: bool
    trained: float | None
    random_critic: float | None
    random_proposer: float | None
    feedback_ignored: float | None = None

    @property
    def lost(self) -> bool | None:
        """Whether the random critic lost SR (None: a figure is missing)."""
        if self.trained is None or self.random_critic is None:
            return None
        return round(self.random_critic, DIGITS) < round(self.trained, DIGITS)


def _main(summaries: Iterable[Summary]) -> list[Summary]:
    """The main table's cells: no disturbance, the trained critic, the evaluation's LLM."""
    return [
        s
        for s in summaries
        if s.disturb_at is None and s.critic != "random" and s.llm != "random" and not s.proposer
    ]


def _levels(summaries: Iterable[Summary]) -> dict[tuple[str, str], list[Summary]]:
    out: dict[tuple[str, str], list[Summary]] = {}
    for s in summaries:
        out.setdefault((s.task, s.level), []).append(s)
    return out


def beats(read: Summary, base: Summary) -> str | None:
    """None when ``read`` beats ``base`` (see the module's doc), else why not."""
    r = (round(read.sr.mean, DIGITS), round(read.es.mean, DIGITS), round(read.nq.mean, DIGITS))
    b = (round(base.sr.mean, DIGITS), round(base.es.mean, DIGITS), round(base.nq.mean, DIGITS))
    if r[0] < b[0]:
        return f"{base.method} SR {b[0]:g} > {r[0]:g}"
    if r[1] > b[1]:
        return f"{base.method} ES {b[1]:g} < {r[1]:g}"
    if r[2] > b[2]:
        return f"{base.method} NQ {b[2]:g} < {r[2]:g}"
    if r[0] == b[0] and r[1] == b[1]:
        return f"ties {base.method} on SR and ES"
    return None


def claims(summaries: Sequence[Summary]) -> list[Claim]:
    """The "claim holds?" column, one per task level of the main table."""
    out = []
    for (task, level), group in _levels(_main(summaries)).items():
        reads = [s for s in group if s.method in READ_METHODS]
        bases = [
            s for s in group if s.method not in READ_METHODS and s.method not in BASELINE_EXCLUDED
        ]
        if not reads or not bases:
            missing = "no ReAd method" if not reads else "no baseline"
            out.append(Claim(task, level, None, f"n/a: {missing} in the table"))
            continue
        parts, holds = [], True
        for read in reads:
            why = [w for base in bases if (w := beats(read, base)) is not None]
            holds = holds and not why
            parts.append(f"{read.method}: " + ("yes" if not why else "no (" + "; ".join(why) + ")"))
        out.append(Claim(task, level, holds, "; ".join(parts)))
    return out


def controls(summaries: Sequence[Summary], hardest: dict[str, str]) -> list[Control]:
    """Per task level and ReAd method present with a control: SR under each control.
    ``hardest``: each task's hardest level."""
    out = []
    for (task, level), group in _levels(s for s in summaries if s.disturb_at is None).items():
        for name in READ_METHODS:
            mine = [s for s in group if s.method == name]
            trained = _sr(
                s for s in mine if s.critic == "trained" and s.llm != "random" and not s.proposer
            )
            rand_critic = _sr(s for s in mine if s.critic == "random")
            rand_proposer = _sr(s for s in mine if s.llm == "random" and s.critic == "trained")
            ignored = _sr(s for s in mine if s.proposer == "control" and s.critic == "trained")
            if rand_critic is None and rand_proposer is None and ignored is None:
                continue
            out.append(
                Control(
                    task,
                    level,
                    name,
                    hardest.get(task) == level,
                    trained,
                    rand_critic,
                    rand_proposer,
                    ignored,
                )
            )
    return out


def _sr(found: Iterable[Summary]) -> float | None:
    return next((s.sr.mean for s in found), None)


# -- tables --------------------------------------------------------------------------------


def _ms(stat: Stat, digits: int = 2) -> str:
    return f"{stat.mean:.{digits}f} ± {stat.std:.{digits}f}"


def main_table(summaries: Sequence[Summary], claimed: Sequence[Claim]) -> Table:
    by_level = {(c.task, c.level): c for c in claimed}
    table = Table(title="SR / ES / NQ per task, level and method (mean ± std)")
    for column in (
        "task",
        "level",
        "method",
        "n",
        "SR",
        "ES",
        "NQ",
        "vetoes",
        "infeasible",
        "fallbacks",
        "OOD",
        "claim holds?",
    ):
        table.add_column(
            column,
            justify="left" if column in ("task", "level", "method", "claim holds?") else "right",
        )
    last = None
    for s in _main(summaries):
        first = (s.task, s.level) != last
        last = (s.task, s.level)
        claim = by_level.get(last)
        verdict = ""
        if first and claim is not None:
            verdict = {True: "yes", False: "no", None: "n/a"}[claim.holds]
        table.add_row(
            s.task if first else "",
            s.level if first else "",
            s.method,
            str(s.episodes),
            _ms(s.sr),
            _ms(s.es, 1),
            _ms(s.nq, 1),
            _ms(s.vetoes, 1),
            _ms(s.infeasible, 1),
            _ms(s.fallbacks, 1),
            _ms(s.ood_flags, 1),
            verdict,
            end_section=False,
        )
    return table


def claim_table(claimed: Sequence[Claim]) -> Table:
    table = Table(
        title="Does the seed's claim hold? (ReAd-S / ReAd-J beat every baseline on "
        "SR and ES at equal or fewer NQ; means, ties are not beats)"
    )
    for column in ("task", "level", "holds?", "why"):
        table.add_column(column)
    for c in claimed:
        table.add_row(c.task, c.level, {True: "yes", False: "no", None: "n/a"}[c.holds], c.detail)
    return table


def disturbance_table(summaries: Sequence[Summary], registered: Iterable[str]) -> Table:
    """The seed's Table 1: a row per method, a column per reset step n (SR / ES / NQ)."""
    known = set(registered)
    missing = [m for m in DISTURB_METHODS if m not in known]
    note = f" (not registered yet: {', '.join(missing)})" if missing else ""
    table = Table(title=f"Table 1: reset at step n on Make Sandwich recipe3, SR / ES / NQ{note}")
    table.add_column("method")
    for n in DISTURB_STEPS:
        table.add_column(f"n = {n}", justify="right")
    cells = {(s.method, s.disturb_at): s for s in summaries if s.disturb_at is not None}
    for name in DISTURB_METHODS:
        if name not in known:
            continue
        row = [name]
        for n in DISTURB_STEPS:
            s = cells.get((name, n))
            row.append("" if s is None else f"{s.sr.mean:.2f} / {s.es.mean:.1f} / {s.nq.mean:.1f}")
        table.add_row(*row)
    return table


def ablation_table(summaries: Sequence[Summary]) -> Table:
    table = Table(title=f"Single-step ablation on Sweep Floor {ABLATION_LEVEL} (mean ± std)")
    for column in ("method", "n", "SR", "ES", "NQ", "vetoes"):
        table.add_column(column, justify="left" if column == "method" else "right")
    for s in _main(summaries):
        if (s.task, s.level) == (ABLATION_TASK, ABLATION_LEVEL) and s.method in ABLATION:
            table.add_row(
                s.method, str(s.episodes), _ms(s.sr), _ms(s.es, 1), _ms(s.nq, 1), _ms(s.vetoes, 1)
            )
    return table


def controls_table(found: Sequence[Control]) -> Table:
    table = Table(
        title="Controls: SR with the trained critic, a random critic of the same "
        "shape, a random proposer with the trained critic, and a proposer that ignores all "
        "feedback with the trained critic"
    )
    for column in (
        "task",
        "level",
        "method",
        "trained",
        "random critic",
        "random proposer",
        "feedback ignored",
        "random critic lost SR?",
    ):
        table.add_column(column)

    def f(v: float | None) -> str:
        return "" if v is None else f"{v:.2f}"

    for c in found:
        lost = {True: "yes", False: "NO: no signal shown", None: ""}[c.lost]
        level = f"{c.level} (hardest)" if c.hardest else c.level
        table.add_row(
            c.task,
            level,
            c.method,
            f(c.trained),
            f(c.random_critic),
            f(c.random_proposer),
            f(c.feedback_ignored),
            lost,
        )
    return table


def markdown_table(summaries: Sequence[Summary], claimed: Sequence[Claim]) -> str:
    """The main table as Markdown, a row per task level, a column per method: ``SR / ES /
    NQ`` means (SR and ES one decimal, NQ whole), and the claim column (for the README); the
    ablation's single-step variants are left out."""
    main = [s for s in _main(summaries) if s.method not in BASELINE_EXCLUDED]
    methods = list(dict.fromkeys(s.method for s in main))
    by_level = {(c.task, c.level): c for c in claimed}
    lines = [
        f"| task | level | {' | '.join(methods)} | claim holds? |",
        "|" + "---|" * (len(methods) + 3),
    ]
    for (task, level), found in _levels(main).items():
        cells = {s.method: s for s in found}
        row = [
            f"{c.sr.mean:.1f} / {c.es.mean:.1f} / {c.nq.mean:.0f}" if (c := cells.get(m)) else ""
            for m in methods
        ]
        claim = by_level.get((task, level))
        verdict = "" if claim is None else {True: "yes", False: "no", None: "n/a"}[claim.holds]
        lines.append(f"| {task} | {level} | {' | '.join(row)} | {verdict} |")
    return "\n".join(lines) + "\n"


def markdown_refusals(summaries: Sequence[Summary]) -> str:
    """Per task level and method, the proposals refused per episode (means): by the
    environment's feasibility check (infeasible) / by the critic (vetoed)."""
    main = [s for s in _main(summaries) if s.method not in BASELINE_EXCLUDED]
    methods = list(dict.fromkeys(s.method for s in main))
    lines = [f"| task | level | {' | '.join(methods)} |", "|" + "---|" * (len(methods) + 2)]
    for (task, level), found in _levels(main).items():
        cells = {s.method: s for s in found}
        row = [
            f"{c.infeasible.mean:.1f} / {c.vetoes.mean:.1f}" if (c := cells.get(m)) else ""
            for m in methods
        ]
        lines.append(f"| {task} | {level} | {' | '.join(row)} |")
    return "\n".join(lines) + "\n"


def markdown_controls(found: Sequence[Control]) -> str:
    """The controls' SR per task level and ReAd method (empty when none was run)."""
    if not found:
        return ""

    def f(v: float | None) -> str:
        return "" if v is None else f"{v:.1f}"

    lines = [
        "| task | level | method | trained | random critic | random proposer | feedback ignored |",
        "|---|---|---|---|---|---|---|",
    ]
    for c in found:
        lines.append(
            f"| {c.task} | {c.level} | {c.method} | {f(c.trained)} | {f(c.random_critic)} | "
            f"{f(c.random_proposer)} | {f(c.feedback_ignored)} |"
        )
    return "\n".join(lines) + "\n"


# -- the report as a whole -----------------------------------------------------------------


@dataclass
class Report:
    """An evaluation's episodes with what is derived from them; ``settings`` and ``timing``
    as given (``timing`` holds the wall times and is left out of :meth:`same_as`);
    ``levels``: each task's levels in its file's order (easiest first, hardest last)."""

    settings: dict[str, Any]
    episodes: list[Episode]
    levels: dict[str, list[str]]
    registered: list[str]
    timing: dict[str, float]

    @property
    def hardest(self) -> dict[str, str]:
        return {task: names[-1] for task, names in self.levels.items() if names}

    @property
    def summaries(self) -> list[Summary]:
        return summarize(self.episodes)

    def to_json(self) -> str:
        summaries = self.summaries
        return json.dumps(
            {
                "format": 1,
                "settings": self.settings,
                "levels": self.levels,
                "registered": self.registered,
                "episodes": [e.to_json() for e in self.episodes],
                "summaries": [s.to_json() for s in summaries],
                "claims": [asdict(c) for c in claims(summaries)],
                "controls": [asdict(c) for c in controls(summaries, self.hardest)],
                "timing": self.timing,
            },
            indent=1,
            sort_keys=True,
        )

    @classmethod
    def from_json(cls, text: str, source: str = "<json>") -> Report:
        try:
            data = json.loads(text)
            return cls(
                settings=dict(data["settings"]),
                episodes=[Episode.from_json(e) for e in data["episodes"]],
                levels={k: list(v) for k, v in data["levels"].items()},
                registered=list(data["registered"]),
                timing=dict(data.get("timing", {})),
            )
        except (ValueError, KeyError, TypeError) as exc:
            raise UsageError(f"{source}: not a team evaluation report ({exc})") from exc

    def same_as(self, other: Report) -> bool:
        """Equal but for the wall times."""
        mine, theirs = json.loads(self.to_json()), json.loads(other.to_json())
        mine.pop("timing"), theirs.pop("timing")
        return bool(mine == theirs)

    def markdown(self) -> str:
        """The main table (SR / ES / NQ), then the proposals refused per episode (infeasible
        / vetoed), then the controls when they were run."""
        summaries = self.summaries
        parts = [
            markdown_table(summaries, claims(summaries)),
            "Refused per episode, infeasible (the environment's check) / vetoed (the critic):\n\n"
            + markdown_refusals(summaries),
        ]
        found = controls(summaries, self.hardest)
        if found:
            parts.append("Controls, SR:\n\n" + markdown_controls(found))
        return "\n".join(parts)

    def print(self, console: Console, *, disturbance: bool = False) -> None:
        summaries = self.summaries
        claimed = claims(summaries)
        if _main(summaries):
            console.print(main_table(summaries, claimed))
            console.print(claim_table(claimed))
        if any(
            (s.task, s.level) == (ABLATION_TASK, ABLATION_LEVEL)
            and s.method in ABLATION
            and s.method.endswith("_single")
            for s in summaries
        ):
            console.print(ablation_table(summaries))
        if disturbance:
            console.print(disturbance_table(summaries, self.registered))
        found = controls(summaries, self.hardest)
        if found:
            console.print(controls_table(found))
            hardest = [c for c in found if c.hardest and c.lost is not None]
            for c in hardest:
                word = (
                    "lost SR" if c.lost else "did NOT lose SR (the critic carries no signal here)"
                )
                console.print(
                    f"{c.task} {c.level} (hardest), {c.method}: the random critic {word}"
                    f" ({c.trained:.2f} -> {c.random_critic:.2f})"
                )


# -- the figure ----------------------------------------------------------------------------

PALETTE = [
    (31, 119, 180),
    (214, 39, 40),
    (44, 160, 44),
    (255, 127, 14),
    (148, 103, 189),
    (140, 86, 75),
    (227, 119, 194),
    (127, 127, 127),
    (188, 189, 34),
    (23, 190, 207),
]
METRICS = (("SR", "sr"), ("ES", "es"), ("NQ", "nq"))


def figure_png(
    summaries: Sequence[Summary], levels: dict[str, list[str]], panel: tuple[int, int] = (300, 220)
) -> bytes:
    """The seed's Figure 3: a row per task, a column per metric (SR, ES, NQ), the levels
    along x (``levels``: each task's in order), one line per method, a legend at the foot."""
    main = _main(summaries)
    tasks = [t for t in levels if any(s.task == t for s in main)]
    methods = list(dict.fromkeys(s.method for s in main))
    colour = {m: PALETTE[i % len(PALETTE)] for i, m in enumerate(methods)}
    pw, ph = panel
    left, top, gap, legend = 60, 40, 30, 24 * ((len(methods) + 3) // 4) + 20
    width = left + len(METRICS) * (pw + gap)
    height = top + max(len(tasks), 1) * (ph + gap + 20) + legend
    image = Image.new("RGB", (width, height), "white")
    draw = ImageDraw.Draw(image)
    font = ImageFont.load_default(size=12)
    draw.text(
        (width / 2, 14),
        "SR / ES / NQ against level, per task (mean over trials)",
        fill="black",
        font=font,
        anchor="mm",
    )
    cells = {(s.task, s.level, s.method): s for s in main}
    for row, task in enumerate(tasks):
        names = [lv for lv in levels[task] if any(s.task == task and s.level == lv for s in main)]
        for col, (title, attr) in enumerate(METRICS):
            x0, y0 = left + col * (pw + gap), top + row * (ph + gap + 20)
            values = [getattr(s, attr).mean for s in main if s.task == task]
            high = 1.0 if attr == "sr" else max([*values, 1.0]) * 1.1
            draw.rectangle([(x0, y0), (x0 + pw, y0 + ph)], outline="black")
            draw.text(
                (x0 + pw / 2, y0 - 8), f"{task}: {title}", fill="black", font=font, anchor="mm"
            )
            for frac in (0.0, 0.5, 1.0):
                y = y0 + ph - frac * ph
                draw.line([(x0, y), (x0 + pw, y)], fill=(225, 225, 225))
                draw.text((x0 - 4, y), f"{high * frac:.2g}", fill="black", font=font, anchor="rm")

            def at(
                k: int,
                value: float,
                x0: int = x0,
                y0: int = y0,
                high: float = high,
                n: int = len(names),
            ) -> tuple[float, float]:
                x = x0 + pw * (k + 0.5) / max(n, 1)
                return x, y0 + ph - ph * min(value, high) / high

            for k, name in enumerate(names):
                draw.text((at(k, 0)[0], y0 + ph + 10), name, fill="black", font=font, anchor="mm")
            for m in methods:
                points = [
                    at(k, cells[(task, lv, m)].__getattribute__(attr).mean)
                    for k, lv in enumerate(names)
                    if (task, lv, m) in cells
                ]
                if len(points) > 1:
                    draw.line(points, fill=colour[m], width=2)
                for x, y in points:
                    draw.ellipse([(x - 3, y - 3), (x + 3, y + 3)], fill=colour[m])
    ly = height - legend + 6
    for i, m in enumerate(methods):
        lx = left + (i % 4) * (width - left) / 4
        y = ly + (i // 4) * 24
        draw.line([(lx, y + 7), (lx + 24, y + 7)], fill=colour[m], width=3)
        draw.text((lx + 30, y + 7), m, fill="black", font=font, anchor="lm")
    out = io.BytesIO()
    image.save(out, format="PNG")
    return out.getvalue()

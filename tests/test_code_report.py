"""Tables II-V, the JSON and the PNG chart of runtime/evaluation/code_report.py from synthetic
episode rows whose figures are known."""

from __future__ import annotations

import io
import json
from dataclasses import replace

import numpy as np
import pytest
from rich.console import Console

from onboard.base.errors import ConfigError
from onboard.evaluation.code_report import (
    COLOURS,
    SEED,
    EpisodeRow,
    build_tables,
    chart_png,
    from_json,
    orderings,
    print_report,
    to_json,
)
from onboard.llm.content import decode_image

STANDIN, CONTROL = "stand-in 0.7", "control (stand-in 1.0)"


def rows_of(method: str, model: str, passes: dict[int, int], trials: int = 4) -> list[EpisodeRow]:
    """``passes[task]`` of ``trials`` episodes pass, for each task given."""
    return [
        EpisodeRow(task, f"t{task}", method, model, trial, success=trial < passes[task])
        for task in passes
        for trial in range(trials)
    ]


def sample() -> list[EpisodeRow]:
    rows = rows_of("full", STANDIN, {1: 4, 2: 3, 3: 2})
    rows += rows_of("no_internal", STANDIN, {1: 3, 2: 3, 3: 1})
    rows += rows_of("no_external", STANDIN, {1: 3, 2: 2, 3: 1})
    rows += rows_of("no_both", STANDIN, {1: 2, 2: 2, 3: 1})
    rows += rows_of("progprompt", STANDIN, {1: 2, 2: 0, 3: 0})
    rows += rows_of("saycan", STANDIN, {1: 1, 2: 1, 3: 0})
    rows += rows_of("full", CONTROL, {1: 4, 2: 4, 3: 4})
    return rows


def test_success_tables_have_each_lines_figures_and_the_seeds_beside() -> None:
    two, three, four, _ = build_tables(sample())
    assert two.tasks == (1, 2, 3)
    line = two.line("full", STANDIN)
    assert [line.cell(t, False) for t in (1, 2, 3)] == ["100%", "75%", "50%"]
    assert line.average(two.tasks) == pytest.approx(0.75)
    assert two.line("full", CONTROL).average(two.tasks) == 1.0
    # the seed's Table II has a real-robot and a simulated column; Tables III and IV are its
    # real-robot experiments, so their ReplanVLM line is Table II's real-robot column
    seed = {ln.label.rsplit(", ", 1)[1]: ln for ln in two.lines if ln.model == SEED}
    assert seed["sim"].average(two.tasks) == pytest.approx((100 + 100 + 90) / 300)
    assert seed["real robot"].average(two.tasks) == pytest.approx((100 + 90 + 100) / 300)
    assert next(ln.label for ln in four.lines if ln.model == SEED).endswith(", real robot")
    assert four.line("full", SEED).average(four.tasks) == pytest.approx((100 + 90 + 100) / 300)
    assert [ln.method for ln in three.lines if ln.model == STANDIN] == [
        "saycan", "progprompt", "full"
    ]  # fmt: skip
    assert three.line("saycan", STANDIN).average(three.tasks) == pytest.approx(2 / 12)
    assert three.line("progprompt", STANDIN).average(three.tasks) == pytest.approx(2 / 12)
    # the control model ran only ReplanVLM: Table III has no baseline line for it
    assert [ln.method for ln in three.lines if ln.model == CONTROL] == ["full"]
    assert four.line("no_both", STANDIN).value(1) == 0.5
    assert four.line("no_external", SEED).value(7) == 0.7


def test_disturbed_episodes_count_in_table_five_not_in_the_success_tables() -> None:
    calm = rows_of("full", STANDIN, {1: 1}, trials=2)
    shaken = [
        EpisodeRow(1, "t1", "full", STANDIN, 10, False, planted=2, internal_detected=2,
                   internal_corrected=1, internal_by_runtime=1, disturbed=True,
                   disturbance_broke=True, external_detected=True, external_corrected=False),
        EpisodeRow(1, "t1", "full", STANDIN, 11, True, planted=1, internal_detected=0,
                   disturbed=True, disturbance_broke=True, external_detected=True,
                   external_corrected=True),
        EpisodeRow(1, "t1", "full", STANDIN, 12, True, disturbed=True),  # it broke nothing
        EpisodeRow(2, "t2", "full", STANDIN, 0, True),
    ]  # fmt: skip
    two, *_, five = build_tables(calm + shaken)
    assert two.line("full", STANDIN).by_task[1].total == 2
    internal = five.line("full", STANDIN, "internal detected").by_task
    assert (internal[1].hits, internal[1].total) == (2, 3) and 2 not in internal
    assert five.line("full", STANDIN, "internal corrected").cell(1, True) == "1/3"
    # of the two detected, one by the runtime's own checks (not the stand-in's Inner Bot)
    runtime = five.line("full", STANDIN, "of those, by the runtime's checks")
    assert runtime.cell(1, True) == "1/2"
    assert five.line("full", STANDIN, "external detected").cell(1, True) == "2/2"
    assert five.line("full", STANDIN, "external corrected").cell(1, True) == "1/2"
    assert five.line("full", STANDIN, "external corrected").cell(2, True) == "-"
    assert five.line("full", SEED, "external detected").value(4) == 0.8
    everything = build_tables(calm + shaken, include_disturbed=True)[0]
    assert everything.line("full", STANDIN).by_task[1].total == 5


def test_orderings_say_where_the_seeds_hold_and_where_not() -> None:
    said = orderings(sample())
    assert said[0].startswith(f"{STANDIN}: ReplanVLM 75.0% > ReplanVLM w/o internal 58.3%")
    assert said[0].endswith(": holds")
    assert "does not hold (ProgPrompt 16.7% is not above SayCan 16.7%)" in said[1]
    assert said[2:] == []  # the control ran ReplanVLM only: nothing to order


def test_the_printed_tables_show_the_figures() -> None:
    console = Console(file=io.StringIO(), width=200, color_system=None)
    print_report(sample(), console)
    text = console.file.getvalue()  # type: ignore[attr-defined]
    for heading in ("Table II", "Table III", "Table IV", "Table V"):
        assert heading in text
    assert "ReplanVLM · stand-in 0.7" in text and "75.0%" in text
    assert "holds" in text


def test_json_round_trips_and_carries_the_tables() -> None:
    rows = sample()
    text = to_json(rows)
    assert from_json(text) == rows
    data = json.loads(text)
    assert [t["number"] for t in data["tables"]] == ["II", "III", "IV", "V"]
    line = data["tables"][0]["lines"][0]
    assert line["by_task"]["2"] == {"hits": 3, "total": 4, "rate": 0.75}
    assert line["average"] == pytest.approx(0.75)


def test_a_bad_report_is_one_line_naming_its_source_and_episode() -> None:
    with pytest.raises(ConfigError, match=r"^r\.json: \[episodes\] not a report"):
        from_json("[]", "r.json")
    bad = json.loads(to_json(sample()[:2]))
    bad["episodes"][1]["method"] = "magic"
    with pytest.raises(ConfigError, match=r"^r\.json: \[episodes\.1\] method 'magic': one of"):
        from_json(json.dumps(bad), "r.json")
    with pytest.raises(ValueError, match=r"corrected 2 \(and by the runtime 0\) <= detected 1"):
        replace(sample()[0], planted=3, internal_detected=1, internal_corrected=2)
    with pytest.raises(ValueError, match=r"by the runtime 2\) <= detected 1 <= planted 3"):
        replace(sample()[0], planted=3, internal_detected=1, internal_by_runtime=2)


def test_the_chart_decodes_at_its_size_with_a_bar_per_method() -> None:
    rows = rows_of("full", STANDIN, {1: 4, 2: 4}) + rows_of("saycan", STANDIN, {1: 2, 2: 0})
    image = decode_image(chart_png(rows, size=(800, 400)))
    assert image.shape == (400, 800, 3)

    def area(method: str) -> int:
        return int(np.all(image == np.array(COLOURS[method], np.uint8), axis=-1).sum())

    # ReplanVLM's bars: 100%, 100%, average 100%; SayCan's: 50%, 0%, average 25%
    assert area("full") > 2 * area("saycan") > 0
    assert area("no_both") == 0  # not run: no bar, no legend entry
    other = decode_image(chart_png(rows + rows_of("full", CONTROL, {1: 1}), model=CONTROL))
    assert other.shape == (540, 960, 3) and not np.array_equal(other[:400, :800], image)

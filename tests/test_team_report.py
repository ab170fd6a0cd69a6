"""The team report from synthetic outcomes (no LLM, no simulator; under 1 s in all): the
figures, the claim column (ties, NQ, missing sides), the controls, Table 1, the PNG, JSON."""

from __future__ import annotations

import io

import pytest
from PIL import Image
from rich.console import Console

from onboard.collab.evaluate import Episode, Stat, summarize
from onboard.collab.report import (
    Report,
    beats,
    claims,
    controls,
    disturbance_table,
    figure_png,
    main_table,
    markdown_table,
)


def ep(method: str, success: bool, steps: int, queries: int, *, level: str = "Y1_G1",
       task: str = "sweep_floor", trial: int = 0, critic: str = "trained",
       llm: str = "standin@0.6", disturb_at: int | None = None,
       vetoes: int = 0) -> Episode:  # fmt: skip
    return Episode(success, steps, queries, vetoes, 0, 0, 0, float(success), task=task,
                   level=level, method=method, trial=trial, seed=100 + trial,
                   disturb_at=disturb_at, llm=llm,
                   critic=critic if method.startswith("read") else "")  # fmt: skip


def cell(method: str, runs: list[tuple[bool, int, int]], **kw: object) -> list[Episode]:
    return [ep(method, s, st, q, trial=i, **kw) for i, (s, st, q) in enumerate(runs)]  # type: ignore[arg-type]


def test_the_figures_are_means_and_population_stds() -> None:
    episodes = cell("read_s", [(True, 4, 8), (False, 15, 30), (True, 5, 10), (True, 6, 12)])
    (s,) = summarize(episodes)
    assert s.episodes == 4
    assert s.sr == Stat(0.75, pytest.approx(0.433013, abs=1e-6))  # type: ignore[arg-type]
    assert s.es.mean == 7.5 and s.es.std == pytest.approx(4.387482, abs=1e-6)
    assert s.nq.mean == 15.0 and s.nq.std == pytest.approx(8.774964, abs=1e-6)


def test_the_claim_column() -> None:
    base = cell("central_plan", [(True, 6, 6), (False, 15, 15)])  # SR 0.5, ES 10.5, NQ 10.5
    better = cell("read_s", [(True, 4, 8), (True, 5, 10)])  # SR 1, ES 4.5, NQ 9
    also = cell("read_j", [(True, 5, 5), (False, 15, 15)])  # SR 0.5, ES 10, NQ 10
    s = summarize(base + better + also)
    (claim,) = claims(s)
    assert claim.holds is True and claim.detail == "read_s: yes; read_j: yes"
    # more NQ than a baseline: no beat, whatever SR and ES say
    costly = cell("read_s", [(True, 4, 20), (True, 5, 20)])
    (claim,) = claims(summarize(base + costly))
    assert claim.holds is False and claim.detail == "read_s: no (central_plan NQ 10.5 < 20)"
    # a tie on SR and ES is not a beat
    tie = cell("read_j", [(True, 6, 6), (False, 15, 15)])
    assert beats(summarize(tie)[0], summarize(base)[0]) == "ties central_plan on SR and ES"
    # worse SR, then worse ES, named in that order
    worse = cell("read_s", [(False, 15, 5), (False, 15, 5)])
    assert beats(summarize(worse)[0], summarize(base)[0]) == "central_plan SR 0.5 > 0"
    slower = cell("read_s", [(True, 15, 5), (False, 15, 5)])
    assert beats(summarize(slower)[0], summarize(base)[0]) == "central_plan ES 10.5 < 15"
    # ablation and disturbance-only methods are not baselines: nothing to test against
    single = cell("read_s_single", [(True, 3, 3)])
    (claim,) = claims(summarize(better + single))
    assert claim.holds is None and claim.detail == "n/a: no baseline in the table"
    (claim,) = claims(summarize(base))
    assert claim.holds is None and claim.detail == "n/a: no ReAd method in the table"


def test_the_controls_say_whether_the_random_critic_lost_sr() -> None:
    trained = cell("read_s", [(True, 4, 8), (True, 5, 10)], level="Y3_G3")
    random_critic = cell("read_s", [(False, 15, 40), (True, 9, 20)], level="Y3_G3",
                         critic="random")  # fmt: skip
    proposer = cell("read_s", [(True, 9, 30), (True, 8, 30)], level="Y3_G3", llm="random")
    (control,) = controls(summarize(trained + random_critic + proposer), {"sweep_floor": "Y3_G3"})
    assert control.hardest and control.lost is True
    assert (control.trained, control.random_critic, control.random_proposer) == (1.0, 0.5, 1.0)
    no_signal = cell("read_s", [(True, 4, 8), (True, 5, 10)], level="Y3_G3", critic="random")
    (control,) = controls(summarize(trained + no_signal), {"sweep_floor": "Y3_G3"})
    assert control.lost is False
    report = Report({}, trained + no_signal, {"sweep_floor": ["Y1_G1", "Y3_G3"]}, [], {})
    console = Console(record=True, width=200)
    report.print(console)
    assert "did NOT lose SR (the critic carries no signal here)" in console.export_text()


def test_table_1_names_the_methods_not_registered_yet() -> None:
    runs = [ep("read_s", True, 9, 20, task="make_sandwich", level="recipe3", disturb_at=n)
            for n in range(4)]  # fmt: skip
    console = Console(record=True, width=200)
    console.print(disturbance_table(summarize(runs), ["read_s", "read_j", "central_plan"]))
    text = console.export_text()
    assert "not registered yet: roco, roco_l, roco_p" in " ".join(text.split())
    assert text.count("1.00 / 9.0 / 20.0") == 4


def test_the_main_table_and_the_png() -> None:
    episodes = []
    for level in ("Y1_G1", "Y2_G2", "Y3_G3"):
        episodes += cell("read_s", [(True, 4, 8)], level=level)
        episodes += cell("central_plan", [(level == "Y1_G1", 6, 6)], level=level)
    summaries = summarize(episodes)
    console = Console(record=True, width=200)
    console.print(main_table(summaries, claims(summaries)))
    text = console.export_text()
    assert "1.00 ± 0.00" in text and text.count("read_s") == 3
    png = figure_png(summaries, {"sweep_floor": ["Y1_G1", "Y2_G2", "Y3_G3"]})
    with Image.open(io.BytesIO(png)) as image:
        image.load()
        assert image.format == "PNG" and image.size[0] >= 900
        colours = {c for _, c in image.getcolors(1 << 16) or []}
        assert (31, 119, 180) in colours and (214, 39, 40) in colours  # one line per method


def test_the_markdown_table_has_a_row_per_level_and_a_column_per_method() -> None:
    episodes = cell("read_s", [(True, 4, 8), (False, 15, 31)])
    episodes += cell("central_plan", [(True, 6, 6), (True, 7, 7)])
    episodes += cell("read_s_single", [(True, 5, 5)])  # the ablation's: not a column
    summaries = summarize(episodes)
    assert markdown_table(summaries, claims(summaries)).splitlines() == [
        "| task | level | read_s | central_plan | claim holds? |",
        "|---|---|---|---|---|",
        "| sweep_floor | Y1_G1 | 0.5 / 9.5 / 20 | 1.0 / 6.5 / 6 | no |",
    ]


def test_the_json_round_trips_and_ignores_the_wall_time() -> None:
    episodes = cell("read_s", [(True, 4, 8), (False, 15, 30)]) + cell(
        "central_plan", [(True, 6, 6)]
    )
    report = Report({"seed": 0}, episodes, {"sweep_floor": ["Y1_G1"]}, ["read_s"], {"seconds": 1})
    again = Report.from_json(report.to_json())
    assert again.to_json() == report.to_json()
    later = Report({"seed": 0}, episodes, {"sweep_floor": ["Y1_G1"]}, ["read_s"], {"seconds": 9})
    assert later.same_as(report) and later.to_json() != report.to_json()
    with pytest.raises(Exception, match="not a team evaluation report"):
        Report.from_json('{"episodes": []}', "x.json")

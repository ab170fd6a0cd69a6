"""The arguments ``onboard task eval`` parses to, with its defaults, for tests that call
``onboard.cli.task.evaluate`` or ``eval_cells`` directly: the stand-in, two trials, seed 0."""

from __future__ import annotations

import argparse


def eval_args(**changes: object) -> argparse.Namespace:
    fields: dict[str, object] = {
        "task": None, "all": False, "levels": None, "ends": False, "methods": None, "trials": 2,
        "first_trial": 0,
        "llm": "standin", "competence": None, "seed": 0, "constrained": False,
        "critic": "trained", "critics": None, "disturb": False, "ablation": False,
        "controls": False, "json": None, "png": None, "markdown": None, "recordings": None,
    }  # fmt: skip
    fields.update(changes)
    return argparse.Namespace(**fields)

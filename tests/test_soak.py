"""The short version of bench/soak.py: ``onboard up`` through a looping mission, measured
from outside the process (/proc), and SIGTERM while a step moves the twin's arm behind
Marlin's emulator, with the local LLM server the service started."""

from __future__ import annotations

import importlib.util
import os
import sys
from pathlib import Path

import pytest

from onboard.testing.soak import run_soak, soak_robot, stop_during_motion

ROOT = Path(__file__).resolve().parent.parent
ONBOARD = Path(sys.executable).parent / "onboard"


def test_a_looping_mission_keeps_memory_descriptors_threads_and_recordings_bounded(
    tmp_path: Path,
) -> None:
    robot = soak_robot(ROOT / "robot.toml", tmp_path, quota_mb=0.3)
    soak = run_soak(ONBOARD, robot, tmp_path, episodes=30, every=5)
    assert soak.exit_code == 0 and soak.verdicts == {"success": 30}
    assert soak.judged == soak.indexed == 30  # every episode judged once, every file indexed
    assert soak.rotated == soak.deleted > 0  # the quota rotated, and the index says which
    assert soak.files + soak.deleted == 30
    for sample in soak.samples:
        assert sample.folder_bytes <= soak.quota_bytes + soak.largest_episode, sample
    assert soak.growth("fds", 5) == 0 and soak.growth("threads", 5) == 0, soak.samples
    # an episode that kept its own ONNX session alive grew the process 20 MB each
    warm, last = soak.after(5)[0], soak.samples[-1]
    assert last.rss_kb - warm.rss_kb < 60 * 1024, soak.samples


@pytest.mark.slow
@pytest.mark.timeout(900)
def test_sigterm_during_a_twin_motion_stops_the_arm_and_the_local_llm_server(
    tmp_path: Path,
) -> None:
    if importlib.util.find_spec("llama_cpp") is None:
        if os.environ.get("ONBOARD_REQUIRE_LOCAL_LLM") == "1":
            raise RuntimeError("the local-llm extra is required here")
        pytest.skip("the local-llm extra is not installed")
    stop = stop_during_motion(ONBOARD, ROOT / "robot.toml", tmp_path, "local")
    assert stop.exit_code == 143
    assert stop.after_last_motion[-1] == "M410"  # the last line the board got: a stop
    assert stop.arm_moving_after is False
    assert stop.llm_pid is not None and stop.llm_gone is True
    ends = [e for e in stop.log_after if e["event"] == "step_end"]
    assert ends and ends[0]["exit_code"] == 143

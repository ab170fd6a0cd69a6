"""The team evaluation: cells (task, level, method, disturbance), trials, outcomes, and their
aggregation into SR / ES / NQ.

A **cell** is one task level and one method (and, for the seed's Table 1, the step at which
the environment is reset). Each cell runs ``trials`` episodes. Seeds are derived from the
evaluation's seed by name, so a cell's figures do not depend on which other cells ran:

- trial ``i`` of every method at a task level resets the environment with the same seed
  (:func:`env_seed`): methods are compared on the same starts;
- the stand-in LLM is started once per cell with a seed of the task level alone
  (:func:`llm_seed`): every method meets the same model. (The stand-in's draws also count how
  often it has seen a request, so the trials of a cell run in order in one process.)

``first_trial`` starts a cell's trials at another index: ``trials=1, first_trial=3`` runs the
episode trial 3 of a whole cell runs, from the same environment seed, so a cell too long for
one sitting can be measured an episode at a time. What a cell carries from trial to trial
starts afresh (the stand-in's draws, Reflexion's memory); the local model, which is sampled
unseeded, does not depend on it.

The figures (the seed's metrics): **SR** the share of episodes that succeed; **ES** the
environment steps an episode took (an episode that fails counts the step limit); **NQ** the
LLM requests an episode made, checked equal to the ``request`` records of its recording.
Means and standard deviations are over the cell's episodes (the population std, ddof 0).
"""

from __future__ import annotations

import contextlib
import math
import random
import tempfile
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Literal, Protocol

from onboard.base.errors import RecordingError, UsageError
from onboard.collab.critic import Critic
from onboard.collab.envs import TeamEnv, make_env
from onboard.collab.episode import TeamFigures, TeamOutcome, run_team_episode, team_header
from onboard.collab.methods import TeamSettings, TrialMemory, method, registered
from onboard.collab.taskfile import TeamTask, find_team_task
from onboard.config import RobotConfig
from onboard.llm.types import Completes
from onboard.loop.recorder import Recorder, read_recording

__all__ = [
    "ABLATION",
    "ABLATION_LEVEL",
    "BASELINE_EXCLUDED",
    "DISTURB_LEVEL",
    "DISTURB_METHODS",
    "DISTURB_STEPS",
    "READ_METHODS",
    "Cell",
    "CriticChoice",
    "Critics",
    "Episode",
    "EvalSettings",
    "Stat",
    "Summary",
    "default_methods",
    "env_seed",
    "llm_seed",
    "run_cells",
    "run_one",
    "summarize",
]

#: the methods whose claim the table tests (the seed's ReAd-S and ReAd-J)
READ_METHODS = ("read_s", "read_j")
#: registered methods that are not baselines of the main table: the single-step ablation and
#: the disturbance-only RoCo variants
BASELINE_EXCLUDED = ("read_s_single", "read_j_single", "roco_l", "roco_p")
#: the seed's Table 1: reset at step n = 0..3 on Make Sandwich recipe3
DISTURB_TASK, DISTURB_LEVEL, DISTURB_STEPS = "make_sandwich", "recipe3", (0, 1, 2, 3)
DISTURB_METHODS = ("read_s", "roco", "roco_l", "roco_p")
#: the seed's single-step ablation on Sweep Floor Y3_G3
ABLATION_TASK, ABLATION_LEVEL = "sweep_floor", "Y3_G3"
ABLATION = ("read_s", "read_s_single", "read_j", "read_j_single")

CriticChoice = Literal["trained", "random"]


def default_methods() -> list[str]:
    """Every registered method of the main table, in registration order."""
    return [name for name in registered() if name not in BASELINE_EXCLUDED]


def _draw(*parts: object) -> int:
    return random.Random("/".join(map(str, parts))).randrange(1_000_000)


def env_seed(seed: int, task: str, level: str, trial: int) -> int:
    """The environment's seed of a trial: the same for every method of a task level."""
    return _draw("env", seed, task, level, trial)


def llm_seed(seed: int, task: str, level: str) -> int:
    """The stand-in's seed of a task level: the same for every method."""
    return _draw("llm", seed, task, level)


@dataclass(frozen=True)
class Cell:
    task: str
    level: str
    method: str
    #: reset the environment at this step (the seed's Table 1); None: no disturbance
    disturb_at: int | None = None
    #: the critic the ReAd methods score with (a control: "random")
    critic: CriticChoice = "trained"
    #: the proposer: "" the evaluation's LLM; controls: "random" the uniform proposer,
    #: "control" the stand-in that ignores all feedback (the refused lines, the history)
    proposer: str = ""

    @property
    def label(self) -> str:
        extra = [f"reset@{self.disturb_at}"] if self.disturb_at is not None else []
        extra += [f"{self.critic} critic"] if self.critic != "trained" else []
        extra += [f"{self.proposer} proposer"] if self.proposer else []
        return " ".join([self.task, self.level, self.method, *extra])


@dataclass(frozen=True)
class EvalSettings:
    trials: int = 5
    #: the index of the first trial (see the module's docstring)
    first_trial: int = 0
    seed: int = 0
    #: standin | control | local | URL (onboard.cli.team_endpoint) or random (the control)
    llm: str = "standin"
    competence: float | None = None
    #: None: the endpoint's default (constrained for the local model)
    constrained: bool | None = None
    #: where the task files' critic templates are resolved; None: the shipped models/
    critics_root: Path | None = None
    #: write each episode's recording here (with its header); None: in memory
    recordings: Path | None = None


@dataclass
class Episode(TeamFigures):
    """One trial: its cell, seed and LLM, and its figures; ``recording`` is the file's name
    inside the recordings folder."""

    task: str = ""
    level: str = ""
    method: str = ""
    trial: int = 0
    seed: int = 0
    disturb_at: int | None = None
    critic: str = ""
    llm: str = ""
    recording: str | None = None
    #: a control's proposer ("random", "control"); "" the evaluation's LLM
    proposer: str = ""

    def to_json(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> Episode:
        return cls(**data)


@dataclass(frozen=True)
class Stat:
    mean: float
    std: float

    @classmethod
    def of(cls, values: Sequence[float]) -> Stat:
        if not values:
            return cls(math.nan, math.nan)
        mean = sum(values) / len(values)
        var = sum((v - mean) ** 2 for v in values) / len(values)
        return cls(round(mean, 6), round(math.sqrt(var), 6))


@dataclass(frozen=True)
class Summary:
    """A cell's figures over its episodes."""

    task: str
    level: str
    method: str
    disturb_at: int | None
    critic: str
    llm: str
    episodes: int
    sr: Stat
    es: Stat
    nq: Stat
    vetoes: Stat
    fallbacks: Stat
    ood_flags: Stat
    #: proposals the environment's feasibility check refused (vetoes: the critic's)
    infeasible: Stat = Stat(math.nan, math.nan)
    proposer: str = ""

    def to_json(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> Summary:
        stats = {k: Stat(**v) for k, v in data.items() if isinstance(v, dict)}
        return cls(**{**data, **stats})


Key = tuple[str, str, str, int | None, str, str, str]


def _key(e: Episode) -> Key:
    return (e.task, e.level, e.method, e.disturb_at, e.critic, e.llm, e.proposer)


def summarize(episodes: Sequence[Episode]) -> list[Summary]:
    """One summary per cell, in the order the cells first appear."""
    groups: dict[Key, list[Episode]] = {}
    for e in episodes:
        groups.setdefault(_key(e), []).append(e)
    out = []
    for (task, level, name, disturb_at, critic, llm, proposer), group in groups.items():

        def stat(f: Callable[[Episode], float], group: list[Episode] = group) -> Stat:
            return Stat.of([f(e) for e in group])

        out.append(
            Summary(
                task,
                level,
                name,
                disturb_at,
                critic,
                llm,
                len(group),
                sr=stat(lambda e: float(e.success)),
                es=stat(lambda e: e.steps),
                nq=stat(lambda e: e.queries),
                vetoes=stat(lambda e: e.vetoes),
                fallbacks=stat(lambda e: e.fallbacks),
                ood_flags=stat(lambda e: e.ood_flags),
                infeasible=stat(lambda e: e.infeasible),
                proposer=proposer,
            )
        )
    return out


# -- running -------------------------------------------------------------------------------


@dataclass
class Critics:
    """The critics of an evaluation, loaded once each: the trained ones (the task file's
    ``[critic] model`` under ``root``, else the shipped ones) and random controls of their
    shape (written under ``scratch``)."""

    root: Path | None
    scratch: Path
    seed: int
    loaded: dict[tuple[str, str, str], tuple[Critic, Path]] = field(default_factory=dict)

    def trained_file(self, task: TeamTask, level: str) -> Path:
        return task.critic_file(level) if self.root is None else task.critic_path(level, self.root)

    def get(self, task: TeamTask, level: str, choice: CriticChoice) -> tuple[Critic, Path]:
        key = (task.name, level, choice)
        if key not in self.loaded:
            path = self.trained_file(task, level)
            if choice == "random":
                from onboard.collab.controls import random_critic

                Critic.load(path)  # the trained one's own problems first, named as such
                out = self.scratch / task.name / f"{level}-random.onnx"
                path = random_critic(path, out, _draw("critic", self.seed, task.name, level))
            self.loaded[key] = (Critic.load(path), path)
        return self.loaded[key]


def run_one(
    task: TeamTask,
    level: str,
    method_name: str,
    llm: Completes,
    llm_label: str,
    critic: tuple[Critic, Path] | None,
    *,
    seed: int,
    trial: int = 0,
    constrained: bool = False,
    disturb_at: int | None = None,
    critic_kind: str = "trained",
    proposer: str = "",
    record: Path | None = None,
    robot: RobotConfig | None = None,
    env: TeamEnv | None = None,  # type: ignore[type-arg]
    memory: TrialMemory | None = None,
) -> Episode:
    """One episode, recorded at ``record`` (with its header; ``robot`` names the
    robot in it) or in memory; its NQ checked against the recording's request records.
    ``memory``: what the method carries across the trials of its cell (Reflexion's)."""
    chosen = method(method_name)
    env = env or make_env(task, level, starts="held_out")
    settings = TeamSettings(task, level, constrained=constrained)
    header = None
    if record is not None:
        if robot is None:
            raise UsageError("a recorded team episode needs the robot for its header")
        header = team_header(
            robot,
            task.path,
            method_name,
            settings,
            seed,
            env=task.env,
            critic_file=None if critic is None else critic[1],
        )
        record.unlink(missing_ok=True)  # the recorder appends
    with Recorder(record) as recorder:
        outcome: TeamOutcome = run_team_episode(
            env,
            chosen,
            llm,
            None if critic is None else critic[0],
            settings,
            recorder,
            seed,
            header=header,
            disturb_at=disturb_at,
            memory=memory,
        )
    if recorder.fault is not None:
        raise recorder.fault
    records = recorder.records if record is None else list(read_recording(record))
    requests = sum(1 for r in records if r.get("kind") == "request")
    if requests != outcome.queries:
        where = record if record is not None else "the in-memory recording"
        raise RecordingError(
            f"{where}: {requests} request records, but the episode counted NQ = {outcome.queries}"
        )
    return Episode(
        **outcome.figures(),
        task=task.name,
        level=level,
        method=method_name,
        trial=trial,
        seed=seed,
        disturb_at=disturb_at,
        critic=critic_kind if critic else "",
        llm=llm_label,
        recording=None if record is None else record.name,
        proposer=proposer,
    )


class OpensLLM(Protocol):
    """Where each cell's LLM comes from (the CLI's ``Endpoints``): the model answering the
    cell's requests, its label, whether requests are constrained."""

    def open(
        self, cell: Cell, task: str
    ) -> contextlib.AbstractContextManager[tuple[Completes, str, bool]]: ...


def check_cells(cells: Sequence[Cell], settings: EvalSettings) -> None:
    """Refuse what cannot run before any episode does: an unknown method or level, a
    disturbance without the runner's support, a bad trial count."""
    if settings.trials < 1:
        raise UsageError(f"--trials {settings.trials}: must be 1 or more")
    if settings.first_trial < 0:
        raise UsageError(f"--first-trial {settings.first_trial}: must be 0 or more")
    for cell in cells:
        method(cell.method)
        find_team_task(cell.task).level(cell.level)


def run_cells(
    robot: RobotConfig,
    cells: Sequence[Cell],
    settings: EvalSettings,
    llms: OpensLLM,
    progress: Callable[[Cell, int], None] = lambda cell, done: None,
    record: Callable[[Cell, int], Path | None] | None = None,
) -> list[Episode]:
    """Every trial of every cell, in order, each cell's LLM from ``llms``;
    ``progress(cell, episodes done)`` after each; ``record(cell, trial)``: the recording's
    path (default: a file named by the cell and trial in ``settings.recordings``, or none).
    Every critic a cell needs is loaded before the first episode runs (a missing or bad one
    is one ``FILE: reason`` line)."""
    check_cells(cells, settings)
    tasks = {name: find_team_task(name) for name in dict.fromkeys(c.task for c in cells)}
    episodes: list[Episode] = []
    with contextlib.ExitStack() as stack:
        scratch = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="onboard-critic-")))
        critics = Critics(settings.critics_root, scratch, settings.seed)
        for cell in cells:
            if method(cell.method).critic is not None:
                critics.get(tasks[cell.task], cell.level, cell.critic)
        done = 0
        for cell in cells:
            task = tasks[cell.task]
            critic = (
                critics.get(task, cell.level, cell.critic) if method(cell.method).critic else None
            )
            env = make_env(task, cell.level, starts="held_out")
            memory = TrialMemory()  # one per cell: its trials run in order
            with llms.open(cell, task.name) as (llm, label, constrained):
                first = settings.first_trial
                for trial in range(first, first + settings.trials):
                    path = None
                    if record is not None:
                        path = record(cell, trial)
                    elif settings.recordings is not None:
                        path = settings.recordings / _recording_name(cell, trial)
                    episodes.append(
                        run_one(
                            task,
                            cell.level,
                            cell.method,
                            llm,
                            label,
                            critic,
                            seed=env_seed(settings.seed, task.name, cell.level, trial),
                            trial=trial,
                            constrained=constrained,
                            disturb_at=cell.disturb_at,
                            critic_kind=cell.critic,
                            proposer=cell.proposer,
                            record=path,
                            robot=robot,
                            env=env,
                            memory=memory,
                        )
                    )
                    done += 1
                    progress(cell, done)
    return episodes


def _recording_name(cell: Cell, trial: int) -> str:
    parts = [Path(cell.task).stem, cell.level, cell.method]
    parts += [f"reset{cell.disturb_at}"] if cell.disturb_at is not None else []
    parts += [f"{cell.critic}-critic"] if cell.critic != "trained" else []
    parts += [f"{cell.proposer}-proposer"] if cell.proposer else []
    return "-".join([*parts, f"t{trial}"]) + ".jsonl"

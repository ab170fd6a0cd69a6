"""``onboard critic check FILE`` and ``onboard critic train``: a critic's card, and its making.

``check`` loads the model with its card (every mismatch is one ``FILE: reason`` line, exit
2), compares the card with the task level it names when the task file is found (``--task``,
else the shipped ``tasks/`` folder), and prints the card. ``train`` fits a critic on a
dataset (the ``train`` extra) and writes the model and its card.
"""

from __future__ import annotations

import argparse
import contextlib
import importlib
from pathlib import Path
from typing import TYPE_CHECKING, Any

from onboard.base.errors import CriticError, UsageError

if TYPE_CHECKING:
    from onboard.collab.card import CriticCard
    from onboard.config import RobotConfig

# the parsers are built for every onboard command: onnxruntime, pydantic and numpy are
# imported by the commands themselves

__all__ = ["add_parsers", "card_lines", "check_command", "collect_command", "train_command"]


def add_parsers(critic: Any) -> None:
    """Add ``check``, ``collect`` and ``train`` to the ``critic`` sub-parsers (main wires the
    functions)."""
    q = critic.add_parser(
        "check",
        help="load a critic and its card, compare them with the task level; print the card",
        description="Load an ONNX critic and the TOML card beside it, check one against the"
        " other and against the task level the card names; print the card. A problem is one"
        " line FILE: reason and exit 2.",
    )
    q.add_argument("file", type=Path, help="the critic model (.onnx; its card .toml beside it)")
    q.add_argument("--task", type=Path, help="the task file to check the card against")
    q = critic.add_parser(
        "collect",
        help="episodes of the behaviour policy (an LLM over HTTP), augmented: a critic's data",
        description="Run the task level's episodes with the LLM planning as Central Plan does,"
        " plus augmented episodes that cover what it rarely does (the joint WAIT, random"
        " actions), and write the transitions as a dataset for onboard critic train.",
    )
    q.add_argument("task", help="a task name in tasks/ (sweep_floor) or a task file; or a"
                   " person skill of the robot (engage) with --scenarios")  # fmt: skip
    q.add_argument("--level", help="the task level (Y2_G3, recipe3, level5); a team task needs it")
    q.add_argument(
        "--scenarios",
        type=Path,
        help="a skill: the folder of its training scenarios (never the evaluation's)",
    )
    q.add_argument("--out", type=Path, required=True, help="the dataset to write (.npz)")
    q.add_argument(
        "--episodes", type=int, default=200, help="episodes (a skill: per training scenario)"
    )
    q.add_argument("--augment", type=float, default=0.4,
                   help="share of augmented episodes (default 0.4)")  # fmt: skip
    q.add_argument("--llm", default="standin",
                   help="standin | control | local | URL (default: the team stand-in)")  # fmt: skip
    q.add_argument("--competence", type=float, help="the stand-in's competence")
    q.add_argument("--constrained", action="store_true", help="ask for constrained JSON")
    q.add_argument("--seed", type=int, default=0)
    q.add_argument(
        "--probes",
        type=int,
        default=0,
        help="held-out probe states for the critic's advantage metrics (default 0)",
    )
    q.add_argument("--rollouts", type=int, default=10,
                   help="Monte Carlo rollouts per probe candidate (default 10)")  # fmt: skip
    q = critic.add_parser(
        "train",
        help="fit a critic on a dataset (torch: the train extra); write the model and card",
        description="Monte Carlo returns for every agent-prefix subset, a small MLP fitted"
        " with torch, exported to ONNX, and the card with metrics on held-out episodes"
        " beside it.",
    )
    q.add_argument("--data", type=Path, required=True, help="the dataset (.npz)")
    q.add_argument("--out", type=Path, required=True, help="the model to write (.onnx)")
    q.add_argument("--task", help="the task the data must be for")
    q.add_argument("--level", help="the level the data must be for")
    q.add_argument("--seed", type=int, default=0)
    q.add_argument("--steps", type=int, help="gradient steps at most (default 4000)")
    q.add_argument("--gamma", type=float, help="discount (default 0.95)")
    q.add_argument("--heldout", type=float, help="share of episodes held out (default 0.2)")


def check_command(path: Path, task_file: Path | None, robot: RobotConfig | None = None) -> int:
    from onboard.collab.critic import Critic

    critic = Critic.load(path)
    card = critic.card
    skill = _robot_skill(robot, card.task) if task_file is None else None
    if skill is not None:
        checked = _check_against_skill(path, card, skill)
    else:
        checked = _check_against_task(path, card, task_file)
    for line in card_lines(card):
        print(line)
    print(f"task file: {checked}")
    return 0


def _robot_skill(robot: RobotConfig | None, name: str) -> Any:
    """The robot's skill named ``name`` when it has a ``[critic]`` (a skill critic), else None."""
    if robot is None or not (robot.skills_dir / f"{name}.toml").is_file():
        return None
    from onboard.hri.session import load_robot_skill

    skill = load_robot_skill(robot, name)
    return skill if skill.critic is not None else None


def _check_against_skill(path: Path, card: CriticCard, skill: Any) -> str:
    from onboard.hri.critic import check_skill_card

    check_skill_card(path, card, skill, skill.critic.wait)
    return f"skill {skill.path}: matches"


def _check_against_task(path: Path, card: CriticCard, task_file: Path | None) -> str:
    """Compare the card with the task level it names; what was compared, for the listing."""
    try:
        taskfile: Any = importlib.import_module("onboard.collab.taskfile")
        envs: Any = importlib.import_module("onboard.collab.envs")
    except ImportError:
        if task_file is not None:
            raise UsageError(f"--task {task_file}: this onboard has no task-file loader") from None
        return "not checked (this onboard has no task files)"
    if task_file is None:
        task_file = Path(taskfile.shipped_tasks_dir()) / f"{card.task}.toml"
        if not task_file.is_file():
            return f"not checked (no shipped task {card.task!r})"
    task = taskfile.load_team_task(task_file)
    if card.level not in task.levels:
        raise CriticError(f"{path}: level {card.level!r} is not a level of {task_file}")
    env = envs.make_env(task, card.level)
    from onboard.collab.card import check_card

    problems = check_card(
        card, task.name, card.level, env.vocabulary, env.feature_names,
        agents=task.agent_names, reach=env.reach,
    )  # fmt: skip
    if problems:
        more = f" (and {len(problems) - 1} more)" if len(problems) > 1 else ""
        raise CriticError(f"{path}: {problems[0]} ({task_file}){more}")
    return f"{task_file}: matches"


def _fmt(value: float | None, digits: int = 4) -> str:
    return "n/a" if value is None else f"{value:.{digits}g}"


PAIRS = {"probes": "(probe state, first action) pairs", "groups": "state-action groups"}


def card_lines(card: CriticCard) -> list[str]:
    t, m = card.training, card.metrics
    return [
        f"task: {card.task}  level: {card.level}",
        f"agents: {', '.join(card.agents)}",
        f"vocabulary ({len(card.vocabulary)}): {', '.join(card.vocabulary)}",
        f"features ({len(card.features)}): {', '.join(_numbered_runs(card.features))}",
        f"gamma: {card.gamma}  ood margin: {card.ood.margin}  sha256: {card.sha256[:16]}...",
        f"training: {t.data} ({t.episodes} episodes, {t.transitions} transitions;"
        f" {t.heldout_episodes} held out), behaviour {t.behaviour!r},"
        f" augmentation {t.augmentation:.0%}, seed {t.seed}, {t.trainer or 'trainer ?'}",
        f"held out ({m.heldout_transitions} transitions): MSE {_fmt(m.mse)}"
        f" (mean-return predictor {_fmt(m.mse_baseline)}),"
        f" Spearman of advantages {_fmt(m.spearman_advantage, 3)} over {m.advantage_pairs}"
        f" {PAIRS.get(m.advantage_basis, m.advantage_basis)},"
        f" mean |Q(s, empty) - Q(s, WAIT)/gamma| {_fmt(m.wait_gap)}",
        *(
            [
                f"probes: {m.probe_states} held-out states, {m.probe_rollouts} rollouts per"
                f" candidate under {m.probe_policy or '?'}; joint advantage Spearman"
                f" {_fmt(m.spearman_joint, 3)} over {m.joint_pairs} pairs; an oracle-useful"
                f" first action above WAIT: {_fmt(m.useful_over_wait, 3)} by the critic,"
                f" {_fmt(m.useful_over_wait_mc, 3)} by Monte Carlo ({m.useful_pairs} pairs)"
            ]
            if m.advantage_basis == "probes"
            else []
        ),
    ]


def collect_command(robot: RobotConfig, args: argparse.Namespace) -> int:
    if args.scenarios is not None:
        return _collect_skill(robot, args)
    if args.level is None:
        raise UsageError(f"{args.task}: a team task needs --level (a skill needs --scenarios)")
    from rich.progress import Progress

    from onboard.cli.team_endpoint import team_endpoint
    from onboard.collab.collect import CollectSettings, collect
    from onboard.collab.dataset import save_dataset
    from onboard.collab.probes import ProbeSettings
    from onboard.collab.taskfile import find_team_task

    if args.episodes < 1:
        raise UsageError(f"--episodes {args.episodes}: must be 1 or more")
    if not 0.0 <= args.augment <= 1.0:
        raise UsageError(f"--augment {args.augment}: must be within 0 and 1")
    if args.probes < 0 or args.rollouts < 1:
        raise UsageError(f"--probes {args.probes} --rollouts {args.rollouts}: must be 0 or"
                         " more, and 1 or more")  # fmt: skip
    task = find_team_task(args.task)
    task.level(args.level)
    settings = CollectSettings(args.episodes, args.augment, seed=args.seed,
                               constrained=args.constrained)  # fmt: skip
    with contextlib.ExitStack() as stack:
        endpoint = None
        if args.augment < 1.0 or args.probes:  # every episode augmented asks no LLM
            endpoint = stack.enter_context(
                team_endpoint(robot, args.llm, competence=args.competence, seed=args.seed,
                              constrained=args.constrained)
            )  # fmt: skip
        progress = stack.enter_context(Progress(transient=True))
        bar = progress.add_task(f"{task.name} {args.level}", total=args.episodes)
        probes = progress.add_task("probe states", total=args.probes, visible=args.probes > 0)
        data = collect(
            task, args.level, None if endpoint is None else endpoint.client, settings,
            behaviour="" if endpoint is None else f"central_plan by {endpoint.label}",
            progress=lambda done: progress.update(bar, completed=done),
            probes=ProbeSettings(args.probes, args.rollouts, seed=args.seed),
            probe_progress=lambda done: progress.update(probes, completed=done),
        )  # fmt: skip
    save_dataset(data, args.out)
    print(
        f"wrote {args.out}: {len(data)} transitions in {args.episodes} episodes "
        f"({data.meta.augmentation:.0%} augmented), behaviour {data.meta.behaviour!r}"
    )
    return 0


def _collect_skill(robot: RobotConfig, args: argparse.Namespace) -> int:
    """``onboard critic collect SKILL --scenarios DIR``: a person skill's critic data."""
    from rich.progress import Progress

    from onboard.collab.dataset import save_dataset
    from onboard.grounding.embedder import Embedder
    from onboard.hri.collect import PersonCollectSettings, collect_person_data
    from onboard.hri.critic import PersonFeatures
    from onboard.hri.scenario import load_scenario
    from onboard.hri.session import load_robot_skill
    from onboard.testing.random_ask import RandomAsk

    if args.episodes < 1:
        raise UsageError(f"--episodes {args.episodes}: must be 1 or more")
    skill = load_robot_skill(robot, args.task)
    if skill.critic is None:
        raise UsageError(f"{skill.path}: no [critic] table (it names the action WAIT stands for)")
    files = sorted(args.scenarios.glob("*.toml")) if args.scenarios.is_dir() else []
    if not files:
        raise UsageError(f"--scenarios {args.scenarios}: no scenario files (*.toml) there")
    scenarios = [load_scenario(f) for f in files]
    features = PersonFeatures(skill, Embedder(robot.embedder_dir, robot.models.threads).embed)
    settings = PersonCollectSettings(episodes=args.episodes, seed=args.seed)
    total = len(scenarios) * args.episodes
    with Progress(transient=True) as progress:
        bar = progress.add_task(f"{skill.name}: {len(scenarios)} scenarios", total=total)
        data = collect_person_data(
            robot, skill, scenarios, features, skill.critic.wait, RandomAsk, settings,
            progress=lambda done: progress.update(bar, completed=done),
        )  # fmt: skip
    save_dataset(data, args.out)
    print(f"wrote {args.out}: {len(data)} transitions in {total} episodes of"
          f" {len(scenarios)} scenarios, behaviour {data.meta.behaviour!r}")  # fmt: skip
    return 0


def train_command(args: argparse.Namespace) -> int:
    from onboard.collab.train import TrainSettings, train_critic

    defaults = TrainSettings()
    if args.heldout is not None and not 0.0 <= args.heldout < 1.0:
        raise UsageError(f"--heldout {args.heldout}: must be within 0 and 1 (excluded)")
    if args.steps is not None and args.steps < 1:
        raise UsageError(f"--steps {args.steps}: must be 1 or more")
    if args.gamma is not None and not 0.0 < args.gamma <= 1.0:
        raise UsageError(f"--gamma {args.gamma}: must be within 0 (excluded) and 1")
    settings = TrainSettings(
        gamma=defaults.gamma if args.gamma is None else args.gamma,
        steps=args.steps or defaults.steps,
        heldout=defaults.heldout if args.heldout is None else args.heldout,
        seed=args.seed,
    )
    card = train_critic(args.data, args.out, settings, task=args.task, level=args.level)
    print(f"wrote {args.out.with_suffix('.onnx')} and {args.out.with_suffix('.toml')}")
    for line in card_lines(card):
        print(line)
    return 0


def _numbered_runs(names: list[str]) -> list[str]:
    """Names with runs of ``prefix0, prefix1, ...`` written ``prefix0..prefixN`` (an
    embedding's 384 dimensions are one item, not 384)."""
    out: list[str] = []
    k = 0
    while k < len(names):
        stem = names[k].rstrip("0123456789")
        digits = names[k][len(stem) :]
        end = k
        if stem and digits:
            number = int(digits)
            while end + 1 < len(names) and names[end + 1] == f"{stem}{number + end + 1 - k}":
                end += 1
        out.append(names[k] if end - k < 2 else f"{names[k]}..{names[end]}")
        k = end + 1
    return out

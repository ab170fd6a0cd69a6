"""The seed's baselines (its §5.1 and §E.1), each with its own loop, the same LLM and the same
environment as ReAd. Registered as team methods when onboard.collab.methods is imported.

==============  ====================================================================  =======
method          one environment step                                                  NQ/step
==============  ====================================================================  =======
``react``       one joint request asking for a ``Thought:`` line, then the actions    1
                (reasoning + acting); the observation is the environment's feedback
                of the last step (``## Feedback``); earlier steps' thought, action
                and observation in ``## History``. Infeasible actions reach the
                environment (run as WAIT, reported next step)
``reflexion``   ReAct within a trial; after a failed trial one reflection request     1 (+1
                ("why did it fail, what to do differently"), whose answer joins the   after a
                :class:`~onboard.collab.methods.TrialMemory` the evaluation passes    failed
                to each episode of a cell; the next trials' requests carry the last   trial)
                reflections in ``## Feedback``
``mindagent``   a central dispatcher: one request (the dispatcher's system message;   1
                the agents' reach and the state) assigns every agent's action; the
                last step's physical feedback in ``## Feedback``, earlier
                dispatches and their results in ``## History``
``roco``        RoCo's dialogue: every agent but the last speaks in turn (one         N per
                request each: a short message to the others, ending with its own      round,
                action), then the last agent answers the dialogue with the joint      at most
                ``EXECUTE`` plan. Before execution the plan is checked against the    1 +
                environment (``legal``): an infeasible plan goes back with which      refine_
                action is infeasible and why (``## Feedback``) and the dialogue       limit
                starts a new round, at most ``refine_limit`` times; then the last     rounds
                plan runs with its infeasible actions as WAIT (a fallback). Earlier
                steps' final rounds (dialogue, plan, physical feedback) in
                ``## History``, the last ``history_limit`` steps
``roco_l``      RoCo with only the previous step's round in ``## History``            as roco
``roco_p``      RoCo told about the disturbance: after it, every request says in      as roco
                ``## Feedback`` that the environment was reset at step n
==============  ====================================================================  =======

Every dialogue message and reflection is a request record, so NQ counts them. The team
stand-in reads ``## Feedback`` by one rule for every method (its FEEDBACK.md): a line naming an
action with a failure word bans it for that reply. So the framing lines written here carry
no failure word: the environment's own feedback text and the LLM's own words do.

With constrained decoding (``settings.constrained``) the action requests carry the schema of
one enum per agent and nothing else (ReAct's thought is left out: the reply is checked against
the schema, which has no room for it); dialogue messages and reflections are free text.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence

from onboard.base.errors import LLMError
from onboard.collab.methods import (
    Dialogue,
    EpisodeLog,
    Method,
    Request,
    StepSeen,
    TeamAsk,
    TrialMemory,
    Turn,
    register,
)
from onboard.collab.prompts import (
    WAIT,
    HistoryEntry,
    agent_request,
    joint_request,
    proposal_text,
)
from onboard.llm.types import Message

__all__ = ["BASELINES", "observation_lines", "one_line"]

REACT_SYSTEM = (
    "You plan actions for robot arms that work together on one task. Each step every robot "
    "does one action at the same time. Reason about the state and the last observation in one "
    "short thought, then act. Answer only in the reply format asked for."
)
THOUGHT = (
    "First write one line 'Thought: ...' with your reasoning about the state and the last "
    "observation, then the actions."
)
REFLECT = (
    "This trial ended without finishing the task. First write 'Reflection:' and, in two or "
    "three sentences, why the trial went as it did and what the robots should do differently "
    "next time, naming any action to avoid; then the actions you would take from this state."
)
DISPATCHER = (
    "You are the central dispatcher of a team of robot arms. You know what every robot can "
    "reach and the whole state; each step you assign every robot exactly one action so that "
    "together they finish the task in as few steps as possible. Answer only in the reply "
    "format asked for."
)
ROCO_SYSTEM = (
    "You are {agent}, a robot arm that works with {others} on one task. The robots talk "
    "before each step, then do one action each at the same time. Answer only in the reply "
    "format asked for."
)
SPEAK = (
    "Speak to {others} as {agent}: first one short message saying what you will do and what "
    "you need from them, then your own action."
)
SUMMARISE = (
    "You are {agent} and speak last: answer the dialogue above, then give the plan everyone "
    "agreed on, one action per robot."
)
REACT_NOTE = "Each line: a step, its thought and joint action, and what the environment reported."
DISPATCH_NOTE = "Each line: a step, its dispatch, and what the environment reported."
ROCO_NOTE = "Each step's last round of dialogue, the plan run, and what the environment reported."
#: the longest reflection or message text carried into later prompts, in characters
CARRIED = 400


def one_line(text: str, limit: int = CARRIED) -> str:
    """``text`` on one line, at most ``limit`` characters."""
    flat = " ".join(text.split())
    return flat if len(flat) <= limit else flat[: limit - 3] + "..."


def observation_lines(step: StepSeen, agents: Sequence[str]) -> list[str]:
    """The environment's physical feedback of ``step``, one line per agent led by its name
    (``Bob: DUMP failed: the dustpan is empty``; ``Alice: MOVE red_cube done``), then the
    reward."""
    lines = []
    for agent in agents:
        said = step.feedback.get(agent, "")
        lines.append(f"{agent}: {said}" if said else f"{agent}: {step.joint.get(agent, WAIT)} done")
    lines.append(f"Reward of step {step.step}: {step.reward:g}")
    return lines


def _result(step: StepSeen | None) -> str:
    if step is None:
        return ""
    said = "; ".join(f"{a}: {f}" for a, f in step.feedback.items() if f)
    return f"{said or 'all actions done'}, reward {step.reward:g}"


def _by_step(log: EpisodeLog) -> dict[int, StepSeen]:
    return {s.step: s for s in log.steps}


def _last_observation(turn: Turn) -> list[str]:
    return observation_lines(turn.log.steps[-1], turn.env.agents) if turn.log.steps else []


def _trajectory(
    turn: Turn, thoughts: Mapping[int, str] | None = None, *, whole: bool = False
) -> list[HistoryEntry]:
    """Earlier steps (the last ``history_limit``, or all when ``whole``): the joint action
    run, its thought when the method had one, and what the environment reported."""
    entries = []
    for seen in turn.log.steps:
        thought = (thoughts or {}).get(seen.step, "")
        lead = f"Thought: {thought} Action: " if thought else ""
        entries.append(HistoryEntry(seen.step, lead + proposal_text(seen.joint), _result(seen)))
    limit = turn.settings.history_limit
    return entries if whole else entries[-limit:] if limit else []


def _thought(text: str) -> str:
    for line in text.splitlines():
        if line.strip().lower().startswith("thought:"):
            return one_line(line.strip()[len("thought:") :], 200)
    return ""


# -- ReAct, Reflexion ----------------------------------------------------------------------


def _react_request(extra: Callable[[Turn], list[str]]) -> Request:
    def request(turn: Turn, asked: Sequence[str]) -> list[Message]:
        thoughts: dict[int, str] = turn.log.notes.setdefault("thoughts", {})
        return joint_request(
            turn.situation, asked, history=_trajectory(turn, thoughts), history_note=REACT_NOTE,
            feedback=[*extra(turn), *_last_observation(turn)],
            constrained=turn.settings.constrained,
            reply_note="" if turn.settings.constrained else THOUGHT, system=REACT_SYSTEM,
        )  # fmt: skip

    return request


def _heard_thought(turn: Turn, text: str) -> None:
    turn.log.notes.setdefault("thoughts", {})[turn.step] = _thought(text)


def _reflections(memory: TrialMemory | None) -> list[str]:
    if memory is None:
        return []
    first = len(memory.reflections) - len(memory.recent()) + 1
    return [f"Reflection {first + i}: {text}" for i, text in enumerate(memory.recent())]


def _trial_reflections(turn: Turn) -> list[str]:
    return _reflections(turn.log.trials)


def _reflect(turn: Turn, success: bool) -> None:
    """After a failed trial: one reflection request on the whole trial; its answer joins the
    trial memory (a memory of this episode alone when the evaluation gave none)."""
    if success:
        return
    if turn.log.trials is None:
        turn.log.trials = TrialMemory()
    memory = turn.log.trials
    agents = list(turn.env.agents)
    # the whole trial: a reflection is on all of it
    entries = _trajectory(turn, turn.log.notes.get("thoughts", {}), whole=True)
    messages = joint_request(
        turn.situation, agents, history=entries, history_note=REACT_NOTE,
        feedback=[*_reflections(memory), *_last_observation(turn)], reply_note=REFLECT,
        system=REACT_SYSTEM,
    )  # fmt: skip
    try:
        text = turn.ask.ask("reflect", messages, None, agents)
    except LLMError:
        return  # recorded as an error record; nothing to carry
    reflection = one_line(text.strip().removeprefix("Reflection:"))
    if reflection:
        memory.reflections.append(reflection)
        turn.record("reflection", trial=len(memory.reflections), text=reflection)


# -- MindAgent -----------------------------------------------------------------------------


def _mindagent_request(turn: Turn, asked: Sequence[str]) -> list[Message]:
    return joint_request(
        turn.situation, asked, history=_trajectory(turn), history_note=DISPATCH_NOTE,
        feedback=_last_observation(turn), constrained=turn.settings.constrained,
        system=DISPATCHER,
    )  # fmt: skip


# -- RoCo ----------------------------------------------------------------------------------


def _roco_history(turn: Turn, last_only: bool) -> list[HistoryEntry]:
    """Earlier steps' final rounds: the dialogue lines, then the plan run and its result."""
    rounds: dict[int, list[str]] = turn.log.notes.get("dialogue", {})
    ran = _by_step(turn.log)
    steps = sorted(rounds)
    keep = 1 if last_only else turn.settings.history_limit
    entries = []
    for step in steps[-keep:] if keep else []:
        entries += [HistoryEntry(step, line) for line in rounds[step]]
        seen = ran.get(step)
        if seen is not None:
            entries.append(HistoryEntry(step, "EXECUTE " + proposal_text(seen.joint),
                                        _result(seen)))  # fmt: skip
    return entries


def _disturbance_note(turn: Turn) -> list[str]:
    n = turn.log.disturbed_at
    if n is None:
        return []
    return [
        f"Note: the environment was reset at step {n}: after that step's actions every object "
        "went back to a start position. The history above is from before the reset; plan "
        "from the state."
    ]


def _roco_base(turn: Turn, told: bool) -> list[str]:
    return [*(_disturbance_note(turn) if told else []), *_last_observation(turn)]


def _roco_plan(turn: Turn, last_only: bool, told: bool, said: Sequence[str]) -> list[Message]:
    """The last speaker's request for the EXECUTE plan, after the round's dialogue ``said``
    and this step's feasibility feedback so far."""
    agents = list(turn.env.agents)
    last = agents[-1]
    others = ", ".join(a for a in agents if a != last)
    return joint_request(
        turn.situation, agents, history=_roco_history(turn, last_only), history_note=ROCO_NOTE,
        feedback=[*_roco_base(turn, told), *turn.physical, *said],
        constrained=turn.settings.constrained, reply_note=SUMMARISE.format(agent=last),
        system=ROCO_SYSTEM.format(agent=last, others=others),
    )  # fmt: skip


def _roco(last_only: bool, told: bool) -> tuple[Request, Dialogue]:
    """RoCo's plan request (without a dialogue), and its dialogue: every agent but the last
    speaks in turn, one request each (an agent whose request fails is left out), then the
    plan is asked with what they said."""

    def request(turn: Turn, asked: Sequence[str]) -> list[Message]:
        return _roco_plan(turn, last_only, told, [])

    def dialogue(turn: Turn, ask: TeamAsk) -> list[Message]:
        agents = list(turn.env.agents)
        history = _roco_history(turn, last_only)
        base = _roco_base(turn, told)
        said: list[str] = []
        for agent in agents[:-1]:
            others = ", ".join(a for a in agents if a != agent)
            messages = agent_request(
                turn.situation, agent, history=history, history_note=ROCO_NOTE,
                feedback=[*base, *turn.physical, *said],
                reply_note=SPEAK.format(agent=agent, others=others),
                system=ROCO_SYSTEM.format(agent=agent, others=others),
            )  # fmt: skip
            try:
                text = ask.ask("dialogue", messages, None, [agent])
            except LLMError:
                continue  # the error is recorded; the others go on without its message
            said.append(f"[{agent}] {one_line(text)}")
        turn.said = said
        return _roco_plan(turn, last_only, told, said)

    return request, dialogue


def _roco_method(name: str, description: str, last_only: bool, told: bool) -> Method:
    request, dialogue = _roco(last_only, told)
    return Method(name, description, request, refined=True, legal=True, dialogue=dialogue)


_REFLEXION = _react_request(_trial_reflections)

BASELINES = (
    Method("react", "ReAct: a thought then the joint action, the last step's feedback as "
           "the observation", _react_request(lambda _: []), heard=_heard_thought),
    Method("reflexion", "Reflexion: ReAct plus a reflection after each failed trial, carried "
           "into the next trials", _REFLEXION, finish=_reflect, heard=_heard_thought),
    Method("mindagent", "MindAgent: a central dispatcher assigns every agent's action, the "
           "environment's feedback carried", _mindagent_request),
    _roco_method("roco", "RoCo: dialogue, then an EXECUTE plan checked against the environment "
                 "and re-planned with its physical feedback", False, False),
    _roco_method("roco_l", "RoCo-L: RoCo with only the last round's history", True, False),
    _roco_method("roco_p", "RoCo-P: RoCo told about the disturbance", False, True),
)  # fmt: skip
for _baseline in BASELINES:
    register(_baseline)

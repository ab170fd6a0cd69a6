"""A team episode's environment as the loop read it: recorded as ``env`` records while the
episode runs (:class:`RecordedEnv`), answered from them when it is replayed
(:class:`PlaybackEnv`), so a replay needs no simulator, and a task whose environment is not
here (a user's own, registered in their process) replays as well as a shipped one.

What the loop reads of an environment is recorded where it reads it:

- each call that changes the state (``reset``, ``step`` with its joint action and result,
  ``reset_to`` for a disturbance), with what the state then is: ``steps``, ``done``,
  ``success`` and ``reward_total`` (read often, so kept with the change rather than per read);
- each question asked of it: ``describe`` (the state as text), ``features`` (the critic's
  input), ``legal`` (an agent's action, with the actions chosen so far) and
  ``agent_actions``, with the answer.

A replay's environment must be asked the same questions in the same order; the first one
that differs is a divergence naming the record, the field and both values.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, NoReturn

import numpy as np
import numpy.typing as npt

from onboard.base.errors import RecordingError, ReplayDivergence
from onboard.collab.methods import EnvView, StepView
from onboard.loop.recorder import Recorder

__all__ = ["PlaybackEnv", "RecordedEnv"]

#: the state a change leaves, as recorded with it
_STATE = ("steps", "done", "success", "reward_total")


@dataclass(frozen=True)
class RecordedStep:
    """Implements :class:`~onboard.collab.methods.StepView`: a step's recorded result."""

    reward: float
    done: bool
    success: bool
    feedback: Mapping[str, str] = field(default_factory=dict)


class RecordedEnv:
    """Implements :class:`~onboard.collab.methods.EnvView`: ``env``, each read the loop makes
    of it written as an ``env`` record (see the module docstring)."""

    def __init__(self, env: EnvView, recorder: Recorder) -> None:
        self.env, self.recorder = env, recorder

    @property
    def starts(self) -> str:
        """The start states the environment draws from (recorded in ``setup``)."""
        return str(getattr(self.env, "starts", "all"))

    @property
    def agents(self) -> tuple[str, ...]:
        return self.env.agents

    @property
    def vocabulary(self) -> tuple[str, ...]:
        return self.env.vocabulary

    @property
    def feature_names(self) -> tuple[str, ...]:
        return self.env.feature_names

    @property
    def steps(self) -> int:
        return self.env.steps

    @property
    def done(self) -> bool:
        return self.env.done

    @property
    def success(self) -> bool:
        return self.env.success

    @property
    def reward_total(self) -> float:
        return self.env.reward_total

    def reset(self, seed: int) -> None:
        self.env.reset(seed)
        self._changed("reset", seed=seed)

    def reset_to(self, seed: int) -> None:
        self.env.reset_to(seed)  # type: ignore[attr-defined]  # run_team_episode checked it
        self._changed("reset_to", seed=seed)

    def step(self, joint: Mapping[str, str]) -> StepView:
        result = self.env.step(joint)
        self._changed("step", joint=dict(joint),
                      result={"reward": float(result.reward), "done": bool(result.done),
                              "success": bool(result.success),
                              "feedback": dict(result.feedback)})  # fmt: skip
        return result

    def describe(self) -> str:
        text = self.env.describe()
        self.recorder.write("env", call="describe", answer=text)
        return text

    def features(self) -> npt.NDArray[np.float32]:
        found = self.env.features()
        self.recorder.write("env", call="features", answer=[float(x) for x in found])
        return found

    def legal(self, agent: str, action: str, chosen: Mapping[str, str] | None = None) -> str | None:
        reason = self.env.legal(agent, action, chosen)
        self.recorder.write("env", call="legal", agent=agent, action=action,
                            chosen=None if chosen is None else dict(chosen),
                            answer=reason)  # fmt: skip
        return reason

    def agent_actions(self, agent: str) -> list[str]:
        actions = list(self.env.agent_actions(agent))
        self.recorder.write("env", call="agent_actions", agent=agent, answer=actions)
        return actions

    def _changed(self, call: str, **fields: Any) -> None:
        state = {"steps": int(self.env.steps), "done": bool(self.env.done),
                 "success": bool(self.env.success),
                 "reward_total": float(self.env.reward_total)}  # fmt: skip
        self.recorder.write("env", call=call, **fields, state=state)


class PlaybackEnv:
    """Implements :class:`~onboard.collab.methods.EnvView` from a recording's ``setup`` and
    ``env`` records: each read answered as the episode's was (see the module docstring)."""

    def __init__(self, records: Sequence[dict[str, Any]], path: Path) -> None:
        self.path = path
        setup = next((r for r in records if r["kind"] == "setup"), None)
        if setup is None:
            raise RecordingError(f"{path}: a team episode with no setup record; not a valid "
                                 "onboard recording")  # fmt: skip
        self._agents = tuple(str(a) for a in setup["agents"])
        self._vocabulary = tuple(str(a) for a in setup["vocabulary"])
        self._feature_names = tuple(str(a) for a in setup["feature_names"])
        self.starts = str(setup.get("starts", "all"))
        self._calls = [r for r in records if r["kind"] == "env"]
        self._next = 0
        #: the first question asked differently, and how many requests had differed before
        #: it (``requests_diverged``, set by the replay): a loop's check that raises is a
        #: failed check to the loop, so the replay reads the first difference here
        self.diverged: tuple[int, str] | None = None
        self.requests_diverged: Callable[[], int] = lambda: 0
        self._state: dict[str, Any] = {"steps": 0, "done": False, "success": False,
                                       "reward_total": 0.0}  # fmt: skip

    @property
    def agents(self) -> tuple[str, ...]:
        return self._agents

    @property
    def vocabulary(self) -> tuple[str, ...]:
        return self._vocabulary

    @property
    def feature_names(self) -> tuple[str, ...]:
        return self._feature_names

    @property
    def steps(self) -> int:
        return int(self._state["steps"])

    @property
    def done(self) -> bool:
        return bool(self._state["done"])

    @property
    def success(self) -> bool:
        return bool(self._state["success"])

    @property
    def reward_total(self) -> float:
        return float(self._state["reward_total"])

    def reset(self, seed: int) -> None:
        self._change("reset", seed=seed)

    def reset_to(self, seed: int) -> None:
        self._change("reset_to", seed=seed)

    def step(self, joint: Mapping[str, str]) -> StepView:
        record = self._change("step", joint=dict(joint))
        result = record["result"]
        return RecordedStep(float(result["reward"]), bool(result["done"]),
                            bool(result["success"]),
                            {str(k): str(v) for k, v in result["feedback"].items()})  # fmt: skip

    def describe(self) -> str:
        return str(self._take("describe")["answer"])

    def features(self) -> npt.NDArray[np.float32]:
        return np.asarray(self._take("features")["answer"], dtype=np.float32)

    def legal(self, agent: str, action: str, chosen: Mapping[str, str] | None = None) -> str | None:
        answer = self._take("legal", agent=agent, action=action,
                            chosen=None if chosen is None else dict(chosen))["answer"]  # fmt: skip
        return None if answer is None else str(answer)

    def agent_actions(self, agent: str) -> list[str]:
        return [str(a) for a in self._take("agent_actions", agent=agent)["answer"]]

    def _change(self, call: str, **fields: Any) -> dict[str, Any]:
        record = self._take(call, **fields)
        self._state = {key: record["state"][key] for key in _STATE}
        return record

    def _take(self, call: str, **fields: Any) -> dict[str, Any]:
        if self._next >= len(self._calls):
            self._diverged(
                f"{self.path}: the replay asks the environment more than the episode did "
                f"({len(self._calls)} env records; this one: {call})"
            )
        record = self._calls[self._next]
        self._next += 1
        where = f"{self.path}: record {record.get('seq', '?')} (env {record.get('call')})"
        if record.get("call") != call:
            self._diverged(f"{where}: call: recorded {record.get('call')!r}, replayed {call!r}")
        for key, value in fields.items():
            if record.get(key) != value:
                self._diverged(f"{where}: {key}: recorded {record.get(key)!r}, "
                               f"replayed {value!r}")  # fmt: skip
        return record

    def _diverged(self, message: str) -> NoReturn:
        if self.diverged is None:
            self.diverged = (self.requests_diverged(), message)
        raise ReplayDivergence(message)

"""The names of the robot API that generated code may call, in the order its documentation
lists them. One place: the sandbox's check and ``onboard code check`` read them here, and the
API module (``onboard.replan.api``) must define exactly these functions (a test compares)."""

from __future__ import annotations

__all__ = ["API_NAMES", "CODE_COMMANDS"]

API_NAMES: tuple[str, ...] = (
    "detect",
    "find",
    "where",
    "objects_on",
    "pick",
    "place",
    "put_in",
    "give_me",
    "open_drawer",
    "close_drawer",
    "move_to",
    "wait_until_at",
    "wait",
    "holding",
    "home",
)

#: the code skill's driver commands (runtime/replan/driver.py): nothing, run the step's
#: program in the sandbox, stop the arm where it is
CODE_COMMANDS = frozenset({"none", "code.run", "code.halt"})

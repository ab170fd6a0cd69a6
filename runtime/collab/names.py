"""The team skill's driver commands, apart from the driver: ``onboard check`` reads them
without importing the environments."""

from __future__ import annotations

__all__ = ["TEAM_COMMANDS"]

#: ``team.choose`` adds agents' actions, ``team.wait`` has the agents asked WAIT
TEAM_COMMANDS = frozenset({"team.choose", "team.wait", "none"})

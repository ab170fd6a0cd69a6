"""The driver commands a scene skill's actions may name (runtime/manip/arm_driver.py)."""

from __future__ import annotations

__all__ = ["ARM_COMMANDS"]

ARM_COMMANDS = frozenset(
    {"none", "wait", "arm.pick", "arm.place", "arm.push", "arm.give", "arm.home", "arm.recover"}
)

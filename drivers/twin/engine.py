"""PyBullet, loaded without its build-time banner: the twin imports the engine from here."""

from __future__ import annotations

from onboard.drivers.twin.quiet import engine_quiet

with engine_quiet():  # the engine prints its build time when it loads
    import pybullet
    import pybullet_data
    from pybullet_utils.bullet_client import BulletClient

__all__ = ["BulletClient", "pybullet", "pybullet_data"]

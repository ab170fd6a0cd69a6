"""PyBullet, loaded and connected without its chatter: the twin takes the engine from here."""

from __future__ import annotations

from onboard.drivers.twin.quiet import engine_quiet

with engine_quiet():  # the engine prints its build time when it loads
    import pybullet
    import pybullet_data
    from pybullet_utils.bullet_client import BulletClient

__all__ = ["BulletClient", "connect", "pybullet", "pybullet_data"]


def connect() -> BulletClient:
    """A new engine in this process (DIRECT, no window), without its "argv[0]=" line."""
    with engine_quiet():
        return BulletClient(connection_mode=pybullet.DIRECT)

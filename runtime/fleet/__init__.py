"""A fleet over Zenoh: controllers, each owning one arm, and a coordinator running a team
skill across them (docs/fleet.md)."""

"""A fleet over Zenoh: controllers, each owning one arm, and a coordinator running a team
skill across them (docs/fleet.md); and a robot's joint and skill states for ROS 2 on
rmw_zenoh (docs/ros2.md)."""

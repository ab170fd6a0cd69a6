"""Cameras behind one interface: RealSense (pyrealsense2), the physics twin's camera in process,
and the twin's camera served by ``onboard sim serve`` (``kind = "sim-serve"``)."""

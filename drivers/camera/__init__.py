"""Cameras behind one interface: RealSense (pyrealsense2) and the physics twin's camera."""

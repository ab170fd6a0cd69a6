"""Camera frames to scene state: detection, depth to pose, the scene observer, calibration."""

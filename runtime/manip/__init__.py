"""Manipulation skills (the ``scene`` kind): a camera frame with detections and 3-D poses
as the observation, replies read as arm actions with arguments bound to objects in view."""

"""The shipped run-time models, installed as package data (``onboard.models``).

No code: ``onboard.bundled.embedder_dir()`` and ``detector_dir()`` find the model folders.
The scripts that build or train them (``minilm/build.py``, ``detector/train.py``) and the
RealSense recording stay in the repository and are not installed.
"""

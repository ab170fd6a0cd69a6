"""The shipped skills and scenarios, installed as package data (``onboard.skills``).

No code: ``onboard.bundled.skills_dir()`` finds this folder, ``onboard init`` copies it.
"""

"""Hardware behind small interfaces (``onboard.drivers``): arms, cameras, speech, the physics
twin and the protocol emulators the tests drive the arm drivers against.

Imports nothing from the rest of onboard but :mod:`onboard.base` (the error tree, TOML
reading, stop signals); ``tests/test_layers.py`` holds that rule.
"""

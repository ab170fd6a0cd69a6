"""The ``onboard`` command: :mod:`onboard.cli.main` parses, and one module per verb runs."""

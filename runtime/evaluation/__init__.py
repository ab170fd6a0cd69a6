"""Evaluation: the harnesses behind ``onboard eval``, ``onboard eval tidy``, ``onboard code
eval`` and the twin-backed Sort Cubes, the judges that read the twin's truth, the disturbers
and the reports.

The robot never imports this package (tests/test_layers.py holds it): its verdicts come from
what it perceives, and these judges, which read the simulator's truth, only score them. The
test doubles (stand-in LLM servers, the random proposer) stay in :mod:`onboard.testing`.
"""

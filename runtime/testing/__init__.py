"""Test doubles: the stand-in LLM server and its policy.

The robot's loop never imports these; only the CLI (``--llm standin``, ``onboard standin``,
``onboard eval`` without ``--llm``), tests and benchmarks do.
"""

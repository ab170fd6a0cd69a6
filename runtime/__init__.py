"""onboard: a lean on-robot runtime for LLM-planned robot skills."""

__version__ = "0.1.0"

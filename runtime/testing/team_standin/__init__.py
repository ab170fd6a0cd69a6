"""The team stand-in LLM (issue 14, item 8a): an OpenAI-compatible chat server on loopback, in
its own process, that plans multi-robot task actions from the HTTP request alone (per-task
solvers read the prompt's ``## State``); it imports no simulator.

A seeded competence knob p: a useful action with probability p, else a plausible but
unhelpful or an infeasible one. Its reactions to feedback are in ``FEEDBACK.md`` beside this
file (committed before any table was run).

    url, stop = start_team_standin(seed=0, competence=1.0)
    try:
        ...  # ChatClient(LLMConfig(base_url=url, ...))
    finally:
        stop()

or from a shell: ``python -m onboard.testing.team_standin --port 0 --seed 0 --competence 0.8
[--ignore-feedback] [--log FILE]`` (prints its URL on one line once it listens).
"""

from onboard.testing.team_standin.process import start_team_standin

__all__ = ["start_team_standin"]

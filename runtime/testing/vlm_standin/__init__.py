"""The stand-in VLM (issue 13, item 4a): an OpenAI-compatible chat server on loopback, in its
own process, that plays the ReplanVLM bots (Decision, Inner match, Extra, SayCan step) from
the HTTP request alone, decoding the images' pixels itself (the shipped detector, and the
blocks' colours for stacks). It imports nothing of the twin or pybullet.

A seeded competence knob plants the seed's typical errors in its Decision replies; their
rates and its reactions to feedback are documented in ``ERRORS.md`` beside this file.

    with start_vlm_standin(seed=0, competence=1.0, log=None) as base_url:
        ...  # ChatClient(LLMConfig(base_url=base_url, ...))

or from a shell: ``python -m onboard.testing.vlm_standin --port 0 --seed 0 --competence 0.5
--log vlm.jsonl`` (prints its URL on one line once it listens).
"""

from onboard.testing.vlm_standin.process import start_vlm_standin

__all__ = ["start_vlm_standin"]

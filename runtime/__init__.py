"""onboard: a lean on-robot runtime for LLM-planned robot skills.

One importable name, one sub-package per concern; imports only go down the list::

    onboard.cli         the ``onboard`` command, one module per verb (lazy imports)
    onboard.testing     stand-in LLM server and policy: test doubles the robot never imports
    onboard.hri         event manager, scenarios, the person observation, the simulated
                        person and base, episodes, replay, evaluation       (Plan-and-Act)
    onboard.perception  detector, depth to pose, scene observer, hand-eye calibration
    onboard.grounding   embedder, text-to-action mapping, bottom-up candidates
    onboard.llm         chat client, prompts, reply parsing, local model server
    onboard.loop        the closed loop (SkillRunner), clock, skill DSL, recorder, exit codes
    onboard.catalog     a robot's skills and their mappers
    onboard.config      robot.toml (or the bundled example robot when there is none)
    onboard.bundled     where the shipped skills, scenarios and models are (package data:
                        onboard.skills, onboard.models, from the repository's skills/, models/)
    onboard.drivers     hardware behind small interfaces (from the repository's drivers/)
    onboard.base        the error tree, TOML reading with file and line, stop signals

``tests/test_layers.py`` holds the rules: ``onboard.drivers`` imports only itself and
``onboard.base``; nothing the robot runs imports ``onboard.testing``; no import cycles.
"""

__version__ = "0.1.0"

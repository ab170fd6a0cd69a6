"""The closed loop: the skill DSL, its state machine and runner, the clock, the recorder."""

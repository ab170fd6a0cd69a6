"""ReplanVLM's proposal is a plan plus code: the robot API that code calls, the sandbox it runs
in, and (part 2) the bots that write, check and verify it."""

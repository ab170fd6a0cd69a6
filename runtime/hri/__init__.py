"""Human-robot interaction (Plan-and-Act): when to ask, what the person does, episodes.

The event manager and its stimuli, scenario files, the person observation and the check
on it, the simulated person and mobile base, and the episodes that run, replay and
evaluate a skill on them.
"""

"""Several robots on one task (ReAd): team task files (``taskfile``), their simulators
(``envs``), the critics that score joint plans (``critic``, ``card``, ``train``), the prompts,
the methods and the checks that refine plans on those scores (``prompts``, ``methods``,
``baselines``, ``refine``), the team kind of skill on the loop every skill runs (``kind``,
``driver``, ``episode``), and the data a critic learns from (``collect``)."""

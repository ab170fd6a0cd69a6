"""Several robots on one task (ReAd): team task files (``taskfile``), their simulators
(``envs``), the critics that score joint plans (``critic``, ``card``, ``train``), the prompts
and the loops that refine plans on those scores (``prompts``, ``refine``, ``methods``,
``episode``), and the data a critic learns from (``collect``)."""

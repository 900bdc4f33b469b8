"""Experiments: orchestration above search and evaluation -- measurement campaigns of whole
plans (:mod:`~shardlab.experiments.plan_campaign`), the search benchmark
(:mod:`~shardlab.experiments.benchmark`) and RL policy training with measured-plan refresh, one
file per method (:mod:`~shardlab.experiments.train_dreamshard`,
:mod:`~shardlab.experiments.train_autoshard`). Stages below never import this package."""

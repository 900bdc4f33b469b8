"""Experiments: orchestration above search and evaluation -- measurement campaigns of whole
plans (:mod:`~shardlab.experiments.plan_campaign`) and policy training with measured-plan refresh
(:mod:`~shardlab.experiments.policy_training`). Stages below never import this package."""

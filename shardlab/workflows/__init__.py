"""Workflows: hardware-in-the-loop orchestration above search and evaluation -- measurement
campaigns of whole plans (:mod:`~shardlab.workflows.plan_campaign`), search that verifies its own
candidates by measuring them (:mod:`~shardlab.workflows.verify`), the search benchmark
(:mod:`~shardlab.workflows.benchmark`), the Criteo-1TB-sized task (:mod:`~shardlab.workflows.criteo`)
and RL policy training with measured-plan refresh, one file per method
(:mod:`~shardlab.workflows.train_dreamshard`, :mod:`~shardlab.workflows.train_autoshard`, their
options in :mod:`~shardlab.workflows.rl_args`). Stages below never import this package."""

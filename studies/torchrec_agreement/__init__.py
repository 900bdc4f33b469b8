"""Study: do shardlab's measured evaluator and TorchRec's training steps rank plans alike (``README.md``)."""

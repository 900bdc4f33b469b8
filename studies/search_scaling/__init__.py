"""Study: NeuroShard's search time, plan cost and memory as tasks grow (``README.md``)."""

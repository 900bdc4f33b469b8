"""Study: NeuroShard against every baseline on held-out model families, measured (``README.md``)."""

"""Study: DreamShard and AutoShard against their papers' claims, measured here (``README.md``)."""

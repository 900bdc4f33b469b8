"""Study: how often paired-ratio intervals cover the truth when sittings differ (``README.md``)."""

"""Study: how reproducible paired measured comparisons are on this machine (``README.md``)."""

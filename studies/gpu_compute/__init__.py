"""Study: what the measured GPU dataset says (``README.md``)."""

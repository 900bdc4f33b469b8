"""Study: how accurate and how fast are the shipped cost models (``README.md``)."""

"""Study: every sharder on held-out tasks, simulated and measured (``README.md``)."""

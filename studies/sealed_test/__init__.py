"""Study: the sealed test set -- every shipped sharder on families and seeds nothing was designed on, measured once (``README.md``)."""

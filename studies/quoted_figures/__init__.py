"""Raw rounds behind the numbers the README and the docs quote (studies/quoted_figures/README.md)."""

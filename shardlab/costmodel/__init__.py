"""Cost models: analytic (labelled) and neural, fitted to measured samples."""

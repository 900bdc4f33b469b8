"""Data: table pools, the DLRM dataset loader, the synthetic generator, tasks, augmentation."""

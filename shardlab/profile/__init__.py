"""Profiling: real fbgemm TBE kernels (compute), real collectives (comm), a crash-safe store."""

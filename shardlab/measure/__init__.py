"""Measuring: real fbgemm TBE kernels (compute), real collectives (comm), a crash-safe store.
(A *hardware profile*, the machine a cost is for, is data: ``shardlab.data.hardware_profiles``.)"""

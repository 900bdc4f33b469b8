"""Pieces several studies share: the held-out tasks and their measured judgement
(:mod:`studies.common.heldout`) and the sharder names of the studies' records
(:mod:`studies.common.methods`)."""

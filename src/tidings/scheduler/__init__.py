"""The slot and who gets it: the slot's rules over a locked conversation (:mod:`.slot`),
compaction, which holds the same slot (:mod:`.compaction`), the units that begin a turn and the
keeper of its slot, as this process runs them (:mod:`.starter`), in-process scheduling
(:mod:`.coordinator`) over its entries per conversation (:mod:`.entries`), pacing the turns that
start together (:mod:`.pacing`), the periodic sweeps (:mod:`.sweeps`) and waiting until a
conversation settles (:mod:`.settling`)."""

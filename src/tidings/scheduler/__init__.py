"""The slot and who gets it: the slot's rules over a locked conversation (:mod:`.slot`),
compaction, which holds the same slot (:mod:`.compaction`), in-process scheduling and its
keeper (:mod:`.coordinator`), the periodic sweeps (:mod:`.sweeps`) and waiting until a
conversation settles (:mod:`.settling`)."""

"""The records below the kernel, each over the store: the signal outbox (:mod:`.outbox`) and
its dead letters (:mod:`.dead_letters`), operations such as a restart (:mod:`.operations`),
result envelopes (:mod:`.results`), this process's instance and its peers (:mod:`.instances`),
and the typed records read from rows (:mod:`.rows`)."""

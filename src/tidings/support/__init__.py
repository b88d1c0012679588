"""What every layer above uses and none of it knows the kernel: retry policy and backoff
(:mod:`.policy`), metrics (:mod:`.metrics`), per-key locks (:mod:`.locking`), components'
lifetimes (:mod:`.lifetime`) and spans (:mod:`.tracing`)."""

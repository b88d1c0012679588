"""Background tasks (SPEC T): OS processes started by tools and the notifications they earn.

``supervisor`` runs the processes (T1): process groups, bounded capture, timeouts, kills. It
knows nothing of conversations or the database; task state lives elsewhere.
"""

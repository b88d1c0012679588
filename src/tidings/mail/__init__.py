"""Kernel mail and the single door every input enters by."""

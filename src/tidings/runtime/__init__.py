"""The runtime: the composition root and its public facade (``root``), the reading of a database
no runtime of this process runs (``inspection``), and what they are built from -- the
configuration (``config``), the answers to a posted input (``answers``) and the owner-scoped
views of a conversation's background work (``views``)."""

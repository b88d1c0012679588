"""The runtime: its public facade (``root``) and the facade's groups (``groups``, ``views``),
the composition root that builds, starts and stops the components (``kernel``), the reading of
a database no runtime of this process runs (``inspection``), and what they are built from --
the configuration (``config``) and the answers to a posted input (``answers``)."""

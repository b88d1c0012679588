"""A conversation's state above its transcript: the conversations themselves (``catalog``), the
tool calls held for a person's decision (``approvals``), the questions put to a person
(``questions``) and restart as an operation (``lifecycle``). The four stand side by side."""

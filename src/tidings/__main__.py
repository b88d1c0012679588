"""``python -m tidings``: the command line."""

from tidings.cli import main

main()

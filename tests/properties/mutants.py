"""Mutants of the store's lease fencing, to show the outbox state machine catches them (H6).

A pytest plugin: load it with ``-p tests.properties.mutants`` and name the mutant in
``TIDINGS_MUTANT``; every store opened in that session then runs the mutated query. Nothing on
disk changes. ``python -m tests.properties.mutants`` runs the state machine against each
mutant with several seeds and reports, per mutant and seed, whether it was caught::

    python -m tests.properties.mutants --seeds 1,2,3,4,5 --backend sqlite

Mutants (each edits the ``ack`` and ``ack_listed`` queries of both dialects):

* ``ack_token``: an ack does not check the lease token -- a holder whose lease expired and
  was reclaimed acknowledges the new holder's signals;
* ``ack_expiry``: an ack does not check the lease deadline -- an expired lease still acks;
* ``ack_unfenced``: neither.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

from hypothesis import Phase, settings

from tidings.store import base

ENV = "TIDINGS_MUTANT"
TOKEN = ("lease_token = :token AND ", "")
EXPIRY = ("AND lease_deadline_us > :now_us", "")
MUTANTS: dict[str, tuple[tuple[str, str], ...]] = {
    "ack_token": (TOKEN,),
    "ack_expiry": (EXPIRY,),
    "ack_unfenced": (TOKEN, EXPIRY),
}
ROOT = Path(__file__).resolve().parents[2]
MACHINE = "tests/properties/test_outbox_state_machine.py"

_load_queries = base.load_queries


def _mutated(dialect: str) -> dict[str, base.Query]:
    queries = _load_queries(dialect)
    name = os.environ.get(ENV)
    if not name:
        return queries
    for query in ("ack", "ack_listed"):
        ack = queries[query]
        statements = list(ack.statements)
        for old, new in MUTANTS[name]:
            if not any(old in s for s in statements):
                raise RuntimeError(f"mutant {name}: {old!r} is not in the {dialect} {query} query")
            statements = [s.replace(old, new) for s in statements]
        queries[query] = replace(ack, statements=tuple(statements))
    return queries


base.load_queries = _mutated
if os.environ.get(ENV):
    # Whether the machine fails is the question, not its smallest example: no shrinking.
    settings.register_profile(
        "mutant", phases=(Phase.explicit, Phase.reuse, Phase.generate), print_blob=False
    )
    settings.load_profile("mutant")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--mutants", default=",".join(MUTANTS))
    parser.add_argument("--seeds", default="1,2,3,4,5")
    parser.add_argument("--backend", choices=("sqlite", "postgres", "both"), default="sqlite")
    args = parser.parse_args()
    selector = "" if args.backend == "both" else f"[{args.backend}]"
    caught_all = True
    for mutant in args.mutants.split(","):
        caught = []
        for seed in args.seeds.split(","):
            run = subprocess.run(
                [sys.executable, "-m", "pytest", "-q", "-x", "-p", "no:cacheprovider",
                 "-p", "tests.properties.mutants", f"--hypothesis-seed={seed}",
                 f"{MACHINE}::test_s4_s5_s6_s7_s8_s9_s10_deliveries_follow_the_model{selector}"],
                cwd=ROOT, env={**os.environ, ENV: mutant}, capture_output=True, text=True,
                check=False,
            )
            caught.append(run.returncode != 0)
            sys.stdout.write(f"{mutant} seed {seed}: {'caught' if caught[-1] else 'MISSED'}\n")
            sys.stdout.flush()
        sys.stdout.write(f"{mutant}: caught in {sum(caught)} of {len(caught)} seeds\n")
        caught_all = caught_all and all(caught)
    return 0 if caught_all else 1


if __name__ == "__main__":
    raise SystemExit(main())

"""``sharding-lab challenge list|check|solution``: the challenges on the command line."""

from __future__ import annotations

import json
import shlex
import sys

from ..errors import ConfigError
from ..lessons.challenges import CHALLENGES, get, solution_args
from ..training.config import plan as make_plan
from ..training.options import config_from_args


def add_parser(commands, add_config_options) -> None:
    """The ``challenge`` subcommand of :mod:`sharding_lab.cli.main` (``commands``: its subparsers)."""
    parser = commands.add_parser("challenge", help="challenges that check themselves: list, check, solution")
    actions = parser.add_subparsers(dest="action", required=True)
    listing = actions.add_parser("list", help="every challenge: id, title, goal")
    listing.add_argument("--json", action="store_true", help='print [{"id", "title", "goal"}]')
    checking = actions.add_parser("check", help="check a configuration (the config options) against a challenge")
    checking.add_argument("id", help="the challenge's id (see 'challenge list')")
    add_config_options(checking)
    checking.add_argument("--json", action="store_true", help='print {"solved", "why"}')
    solving = actions.add_parser("solution", help="config options that solve a challenge, on one line")
    solving.add_argument("id", help="the challenge's id")


def main(args) -> int:
    """Run a parsed ``challenge`` command. Solved or not, a check exits 0; an unknown id or a bad
    configuration exits 2 with one line on stderr."""
    try:
        if args.action == "list":
            if args.json:
                print(json.dumps([c.to_json() for c in CHALLENGES.values()]))
            else:
                for c in CHALLENGES.values():
                    print(f"{c.id:<24} {c.level_name:<6} {c.title}: {c.goal}")
            return 0
        challenge = get(args.id)
        if args.action == "solution":
            print(shlex.join(solution_args(challenge)))
            return 0
        solved, why = challenge.check(make_plan(config_from_args(args)))
        if args.json:
            print(json.dumps({"solved": solved, "why": why}))
        else:
            print(f"{'solved' if solved else 'not solved'}: {why}")
        return 0
    except ConfigError as error:
        print(f"error: {error}", file=sys.stderr)
        return 2

"""The ``ticlust`` argument parser: each command's module adds its own subcommand and arguments."""
from __future__ import annotations

import argparse

from . import curate, export, extract, fit, gui, methods, predict

#: Each command and the module that parses and runs it, in the order ``ticlust --help`` lists them.
COMMANDS = {"methods": methods, "fit": fit, "predict": predict, "extract": extract, "export": export,
            "curate": curate, "gui": gui}


def build_parser() -> argparse.ArgumentParser:
    """The parser of every command; ``--debug`` is common to them all."""
    parser = argparse.ArgumentParser(prog="ticlust", description="Transformation-invariant clustering of image stacks and landmark shapes.")
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument("--debug", action="store_true", help="show the full traceback of an unexpected error")
    sub = parser.add_subparsers(dest="command", required=True)
    for command in COMMANDS.values():
        command.add_parser(sub, common)
    return parser

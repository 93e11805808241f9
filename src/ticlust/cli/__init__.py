"""Command line: ``ticlust methods``, ``ticlust fit``, ``ticlust extract``, ``ticlust predict``, ``ticlust export``,
``ticlust curate``, ``ticlust gui``; one module per command, what they share in ``common``."""
from __future__ import annotations

from .common import guarded
from .parser import COMMANDS, build_parser


def main(argv: list[str] | None = None) -> int:
    """Parse ``argv`` (default: the process's arguments) and run its command; the exit status."""
    args = build_parser().parse_args(argv)
    return guarded(COMMANDS[args.command].run, args)

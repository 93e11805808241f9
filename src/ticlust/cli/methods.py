"""``ticlust methods``: the registered methods and their parameters with defaults."""
from __future__ import annotations


def add_parser(sub, common) -> None:
    sub.add_parser("methods", parents=[common], help="list the methods and their parameters with defaults")


def run(args) -> int:
    from ..methods import available_methods, get_method
    from ..methods.base import param_infos

    for name in available_methods():
        spec = get_method(name)
        print(f"{name}: {spec.title} [{', '.join(spec.inputs)}; K = {spec.default_k} by default]" + (f" — {spec.paper}" if spec.paper else ""))
        for info in param_infos(spec.config):
            choices = f" one of {', '.join(map(str, info.choices))};" if info.choices else ""
            print(f"    {info.name} = {info.default!r}:{choices} {info.doc}")
    return 0

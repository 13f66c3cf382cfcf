"""Test helpers for the per-signature plans (registry/plan.py): run a call through one overload's
family planner alone, or through the checked implementations alone (the reference a plan must match
bitwise)."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import torch
from torch_rbln.registry import Decline

from torch_rbln import registry


def entry(name: str) -> registry.Op:
    return registry.TABLE[[op.name for op in registry.TABLE].index(name)]


def planned(name: str) -> Callable[[tuple, dict], Any]:
    """`(args, kwargs) -> result`, the plan of overload `name` for that call run once; None when the
    family keys no plan for it (no signature, NO_PLAN) or the plan leaves the call to the
    implementation; "decline: <reason>" when the family declines the signature."""
    family = entry(name).planner

    def call(args: tuple, kwargs: dict) -> Any:
        signed = family.signature(args, kwargs)
        if signed is None:
            return None
        key, operands = signed
        try:
            plan = family.plan(key, operands)
        except Decline as decline:
            return f"decline: {decline.reason}"
        return None if plan.run is None else plan.run(operands)

    return call


@contextmanager
def general_path() -> Iterator[None]:
    """Every table entry runs its checked implementation (the dispatcher's path for a user kernel):
    no plan, no fast path."""
    saved = dict(registry._user)
    for op in registry.TABLE:
        registry._user.setdefault(op.name, (op.kernel, None))
    try:
        yield
    finally:
        registry._user.clear()
        registry._user.update(saved)


def to_rbln(value: Any) -> Any:
    """`value` with its tensors (also inside lists) moved to rbln."""
    if isinstance(value, torch.Tensor):
        return value.to("rbln")
    if isinstance(value, list):
        return [to_rbln(v) for v in value]
    return value


def to_cpu(value: Any) -> Any:
    """`value` with its tensors (also inside tuples and lists, as a list) on the CPU; None stays None."""
    if isinstance(value, (tuple, list)):
        return [to_cpu(v) for v in value]
    return None if value is None else value.cpu()

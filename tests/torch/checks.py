"""Helpers of the worker scripts: named checks whose outcome is recorded instead of
raised, and exact tensor comparison."""
import traceback

import torch


def checker(results):
    """A decorator factory: @check(name) runs the function at once and records "ok" or the
    traceback under `name` in `results`."""
    def check(name):
        def deco(fn):
            try:
                fn()
                results[name] = "ok"
            except Exception:  # noqa: BLE001  reported per check
                results[name] = traceback.format_exc()
            return fn
        return deco
    return check


def same(a, b, what=""):
    """a equals b exactly: dtype, shape and every element."""
    if a.dtype != b.dtype or a.shape != b.shape or not torch.equal(a, b):
        raise AssertionError(f"{what}: snccl {a.flatten()[:16]} != reference {b.flatten()[:16]}")

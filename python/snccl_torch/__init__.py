"""torch.distributed backend "snccl": registered on import.

    import snccl_torch                      # registers the backend
    torch.distributed.init_process_group("snccl", ...)

The backend calls the NCCL C API of the library named by SNCCL_TORCH_LIB (a path or a
soname; default: the libsnccl built with this extension). See docs/pytorch.md.
"""
import inspect

import torch
import torch.distributed as dist

from . import _C

BACKEND_NAME = "snccl"
LIB_ENV = _C.LIB_ENV
ProcessGroupSnccl = _C.ProcessGroupSnccl


def library_path():
    """The NCCL-compatible library file in use (loads it on first call)."""
    return _C.library_path()


def library_version():
    """ncclGetVersion of the library in use, e.g. 22809."""
    return _C.library_version()


def has_host_streams():
    """True when operations run asynchronously on snccl host streams."""
    return _C.has_host_streams()


def allreduce_avg_hook(process_group, bucket):
    """A DDP communication hook: averages each gradient bucket with one all_reduce AVG
    (ncclAvg), instead of DDP's default division of the bucket by the world size followed
    by an all_reduce SUM, which passes over every gradient once more. Register it with
    model.register_comm_hook(group_or_None, snccl_torch.allreduce_avg_hook). The results
    equal the default's up to rounding (exactly, when the world size is a power of two)."""
    group = process_group if process_group is not None else dist.group.WORLD
    work = dist.all_reduce(bucket.buffer(), op=dist.ReduceOp.AVG, group=group, async_op=True)
    return work.get_future().then(lambda fut: fut.value()[0])


def _register(name=BACKEND_NAME):
    if name.upper() in getattr(dist.Backend, "_plugins", {}):
        return  # registering twice asserts
    params = inspect.signature(dist.Backend.register_backend).parameters
    if "devices" in params and hasattr(_C, "create_extended"):
        # torch >= 2.6: the extended creator, which splits the parent's communicator when
        # torch passes one (new_group on a default group bound to a device)
        dist.Backend.register_backend(name, _C.create_extended, extended_api=True,
                                      devices=["cpu"])
    elif "devices" in params:  # torch >= 2.0
        dist.Backend.register_backend(name, _C.create, extended_api=False, devices=["cpu"])
    else:  # torch 1.13
        dist.Backend.register_backend(name, _C.create)


_register()

__all__ = ["BACKEND_NAME", "LIB_ENV", "ProcessGroupSnccl", "library_path", "library_version",
           "has_host_streams", "allreduce_avg_hook"]

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


class QuantizedState:
    """The state of quantized_allreduce_hook: the process group (None: the default group),
    the format (bits 8 or 4, block_size elements per scale) and, with error_feedback, one
    residual per gradient bucket: what quantization lost in a step, added back in the next.
    """

    def __init__(self, process_group=None, bits=8, block_size=256, error_feedback=True):
        if bits not in (8, 4):
            raise ValueError("bits must be 8 or 4, not %r" % (bits,))
        self.process_group = process_group
        self.bits = bits
        self.block_size = block_size
        self.error_feedback = error_feedback
        self.residuals = {}  # bucket index -> float32 tensor of the bucket's size


def _snccl_backend(group):
    if isinstance(group, ProcessGroupSnccl):
        return group  # torch 1.13: the group is the backend
    get = getattr(group, "_get_backend", None)
    if get is not None:
        backend = get(torch.device("cpu"))
        if isinstance(backend, ProcessGroupSnccl):
            return backend
    raise RuntimeError("snccl_torch.quantized_allreduce_hook needs a process group of the snccl "
                       "backend, got %r" % (group,))


def quantized_allreduce_hook(state, bucket):
    """A DDP communication hook: averages each gradient bucket with a quantized all_reduce
    (sncclAllReduceQuantized: int8 or int4 on the wire, about 4x or 8x fewer bytes), with
    error feedback per bucket. Register it with
        model.register_comm_hook(snccl_torch.QuantizedState(bits=8), snccl_torch.quantized_allreduce_hook)
    Gradients of other float types are quantized from a float32 copy. See docs/compression.md.
    """
    group = state.process_group if state.process_group is not None else dist.group.WORLD
    backend = _snccl_backend(group)
    buf = bucket.buffer()
    grads = buf if buf.dtype == torch.float32 else buf.float()
    residual = torch.empty(0)
    if state.error_feedback:
        # DDP may rebuild its buckets after the first step: a bucket whose size changed
        # starts with a fresh residual.
        residual = state.residuals.get(bucket.index())
        if residual is None or residual.numel() != grads.numel():
            residual = torch.zeros(grads.numel(), dtype=torch.float32)
            state.residuals[bucket.index()] = residual
    work = backend.allreduce_quantized(grads, residual, state.bits, state.block_size, True)

    def done(fut):
        if grads is not buf:
            buf.copy_(grads)
        return buf

    return work.get_future().then(done)


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
           "has_host_streams", "allreduce_avg_hook", "QuantizedState", "quantized_allreduce_hook"]

"""attn.distributed: torch.distributed's names over attn::distributed (MPI).

Launch with ``mpirun -np N python3 program.py`` (scripts/mpirun.sh sets the loopback options);
a program started without mpirun is rank 0 of a world of 1. Only the default (world) group
exists: ``group=None`` or ``group.WORLD``. Backends "mpi" and "gloo" both mean attn's MPI
transport for CPU tensors; "nccl" needs CUDA tensors, which attn does not have yet.

Collectives are not recorded by autograd, as in torch. Every wait has a deadline (``timeout``
of init_process_group, else ATTN_DIST_TIMEOUT, else 300 s): a rank that dies or hangs ends the
job instead of hanging it. Ranks whose tensors differ in shape or dtype get a RuntimeError that
names both, on every rank (as do transport failures, as in torch.distributed); bad arguments
raise ValueError. After init_process_group, an exception that no code catches on one rank prints
its traceback and ends every rank at once (the others would otherwise wait for it until the
deadline).
"""
import datetime as _datetime
import sys as _sys
import traceback as _traceback
import types as _types

from . import _C

_D = _C.distributed

ReduceOp = _D.ReduceOp
Work = _D.Work
ring_attention = _D.ring_attention
Sharding = _D.Sharding
shard_sequence = _D.shard_sequence
unshard_sequence = _D.unshard_sequence
shard_positions = _D.shard_positions

_state = {"initialized": False, "backend": None}


class _World:
    """The default group (torch.distributed.group.WORLD)."""

    def __repr__(self):
        return "<attn.distributed.group.WORLD>"


group = _types.SimpleNamespace(WORLD=_World())
GroupMember = group


def is_available():
    return True


def is_mpi_available():
    return _D.mpi_available()


def is_nccl_available():
    return False


def is_gloo_available():
    return False


def is_torchelastic_launched():
    return False


def is_initialized():
    return _state["initialized"]


def _check_initialized():
    if not _state["initialized"]:
        raise RuntimeError("Default process group has not been initialized, please make sure to "
                           "call init_process_group.")


def _check_group(group_):
    if group_ is not None and group_ is not group.WORLD:
        raise NotImplementedError(
            "attn.distributed supports only the default group (group=None or group.WORLD); "
            "new_group() is not implemented in attn " + _version())


def _version():
    from . import __version__
    return __version__


def _maybe_async(work, async_op):
    if async_op:
        return work
    work.wait()
    return None


def init_process_group(backend=None, init_method=None, timeout=None, world_size=-1, rank=-1,
                       store=None, group_name="", pg_options=None, device_id=None):
    """Joins the job that mpirun started (torch.distributed.init_process_group).

    init_method and store are accepted and ignored: the launcher's environment says who is who.
    world_size and rank, when given, must match it."""
    if _state["initialized"]:
        raise RuntimeError("trying to initialize the default process group twice!")
    name = (backend or "mpi").lower()
    if "nccl" in name:
        raise RuntimeError("attn.distributed: the nccl backend needs CUDA tensors, and this attn "
                           f"{_version()} has no CUDA backend; use backend='mpi' (or 'gloo')")
    if name not in ("mpi", "gloo", "cpu:gloo", "cpu:mpi"):
        raise ValueError(f"Invalid backend: '{backend}' (attn supports 'mpi'; 'gloo' is an alias)")
    seconds = 0.0
    if timeout is not None:
        seconds = timeout.total_seconds() if isinstance(timeout, _datetime.timedelta) else float(timeout)
        if seconds <= 0:
            raise ValueError(f"timeout must be positive, got {timeout}")
    _D.init(seconds)
    if world_size not in (-1, None) and int(world_size) != _D.world_size():
        raise ValueError(f"init_process_group: world_size={world_size} but the launcher started "
                         f"{_D.world_size()} ranks")
    if rank not in (-1, None) and int(rank) != _D.rank():
        raise ValueError(f"init_process_group: rank={rank} but the launcher made this rank "
                         f"{_D.rank()}")
    _state["initialized"] = True
    _state["backend"] = "mpi"
    _install_excepthook()


def _install_excepthook():
    previous = _sys.excepthook
    if getattr(previous, "_attn_distributed", False):
        return

    def hook(kind, value, tb):
        if previous is _sys.__excepthook__:
            # The whole traceback in one write: the launcher forwards a rank's stderr in chunks
            # and may print its abort notice between the pieces Python's own hook writes.
            _sys.stderr.write("".join(_traceback.format_exception(kind, value, tb)))
        else:
            previous(kind, value, tb)
        if _state["initialized"] and _D.world_size() > 1:
            _sys.stderr.flush()
            _D.abort_job("uncaught {} on this rank: stopping every rank".format(kind.__name__), 1)

    hook._attn_distributed = True
    _sys.excepthook = hook


def destroy_process_group(group_=None):
    _check_group(group_)
    if _state["initialized"]:
        _D.barrier()
    _state["initialized"] = False


def get_backend(group_=None):
    _check_initialized()
    _check_group(group_)
    return _state["backend"]


def get_rank(group=None):  # noqa: F811  (torch's parameter name)
    _check_initialized()
    _check_group(group)
    return _D.rank()


def get_world_size(group=None):  # noqa: F811
    _check_initialized()
    _check_group(group)
    return _D.world_size()


def get_node_local_rank(fallback_rank=None):
    if _state["initialized"] or _D.is_initialized():
        return _D.local_rank()
    if fallback_rank is not None:
        return fallback_rank
    raise RuntimeError("get_node_local_rank: the process group is not initialized")


def barrier(group=None, async_op=False, device_ids=None):  # noqa: F811
    _check_initialized()
    _check_group(group)
    _D.barrier()


def all_reduce(tensor, op=ReduceOp.SUM, group=None, async_op=False):  # noqa: F811
    _check_initialized()
    _check_group(group)
    return _maybe_async(_D.all_reduce_async(tensor, op), async_op)


def broadcast(tensor, src, group=None, async_op=False):  # noqa: F811
    _check_initialized()
    _check_group(group)
    _D.broadcast(tensor, int(src))
    return _done(async_op)


def all_gather(tensor_list, tensor, group=None, async_op=False):  # noqa: F811
    _check_initialized()
    _check_group(group)
    if len(tensor_list) != _D.world_size():
        raise ValueError(f"all_gather: tensor_list has {len(tensor_list)} tensors but the world "
                         f"has {_D.world_size()} ranks")
    gathered = _D.all_gather(tensor.contiguous())
    for i, t in enumerate(tensor_list):
        t.copy_(gathered[i])
    return _done(async_op)


def all_gather_into_tensor(output_tensor, input_tensor, group=None, async_op=False):  # noqa: F811
    _check_initialized()
    _check_group(group)
    gathered = _D.all_gather(input_tensor.contiguous())
    n = _D.world_size()
    if output_tensor.numel() != gathered.numel():
        raise ValueError(f"all_gather_into_tensor: output has {output_tensor.numel()} elements, "
                         f"expected {n} x {input_tensor.numel()}")
    output_tensor.copy_(gathered.reshape(tuple(output_tensor.shape)))
    return _done(async_op)


def reduce_scatter_tensor(output, input, op=ReduceOp.SUM, group=None, async_op=False):  # noqa: A002,F811
    _check_initialized()
    _check_group(group)
    output.copy_(_D.reduce_scatter(input.contiguous(), op).reshape(tuple(output.shape)))
    return _done(async_op)


def reduce_scatter(output, input_list, op=ReduceOp.SUM, group=None, async_op=False):  # noqa: F811
    from . import cat
    _check_initialized()
    _check_group(group)
    flat = cat([t.contiguous().reshape(-1) for t in input_list])
    output.copy_(_D.reduce_scatter(flat, op).reshape(tuple(output.shape)))
    return _done(async_op)


def send(tensor, dst, group=None, tag=0):  # noqa: F811
    isend(tensor, dst, group, tag).wait()


def recv(tensor, src=None, group=None, tag=0):  # noqa: F811
    irecv(tensor, src, group, tag).wait()
    return int(src)


def isend(tensor, dst, group=None, tag=0):  # noqa: F811
    _check_initialized()
    _check_group(group)
    return _D.isend(tensor, int(dst), int(tag))


def irecv(tensor, src=None, group=None, tag=0):  # noqa: F811
    _check_initialized()
    _check_group(group)
    if src is None:
        raise NotImplementedError("recv/irecv from any source (src=None) is not implemented in "
                                  "attn " + _version() + ": pass src")
    return _D.irecv(tensor, int(src), int(tag))


def reduce(tensor, dst, op=ReduceOp.SUM, group=None, async_op=False):  # noqa: A001,F811
    """torch.distributed.reduce: the reduction lands in rank dst's tensor (computed as an
    all-reduce; the other ranks' tensors are left unchanged, which torch allows)."""
    _check_initialized()
    _check_group(group)
    tmp = tensor.clone()
    _D.all_reduce(tmp, op)
    if _D.rank() == int(dst):
        tensor.copy_(tmp)
    return _done(async_op)


def gather(tensor, gather_list=None, dst=0, group=None, async_op=False):  # noqa: F811
    """torch.distributed.gather: rank dst receives every rank's tensor in gather_list."""
    _check_initialized()
    _check_group(group)
    gathered = _D.all_gather(tensor.contiguous())
    if _D.rank() == int(dst):
        if gather_list is None or len(gather_list) != _D.world_size():
            raise ValueError("gather: rank {} (dst) needs a gather_list of {} tensors".format(
                dst, _D.world_size()))
        for i, t in enumerate(gather_list):
            t.copy_(gathered[i])
    return _done(async_op)


def scatter(tensor, scatter_list=None, src=0, group=None, async_op=False):  # noqa: F811
    """torch.distributed.scatter: rank i receives scatter_list[i] of rank src."""
    from . import stack
    _check_initialized()
    _check_group(group)
    n = _D.world_size()
    if _D.rank() == int(src):
        if scatter_list is None or len(scatter_list) != n:
            raise ValueError("scatter: rank {} (src) needs a scatter_list of {} tensors".format(
                src, n))
        everything = stack([t.contiguous() for t in scatter_list])
    else:
        everything = _C.zeros([n] + list(tensor.shape), dtype=tensor.dtype)
    everything = everything.contiguous()
    _D.broadcast(everything, int(src))
    tensor.copy_(everything[_D.rank()])
    return _done(async_op)


def _object_tensor(obj):
    import pickle
    import numpy as np
    data = np.frombuffer(pickle.dumps(obj), dtype=np.uint8).astype(np.int64)
    return _C.from_numpy(data)


def _tensor_object(t, length):
    import pickle
    import numpy as np
    return pickle.loads(np.asarray(t.numpy()[:length], dtype=np.uint8).tobytes())


def broadcast_object_list(object_list, src=0, group=None, device=None):  # noqa: F811
    """torch.distributed.broadcast_object_list: rank src's picklable objects, in place on every
    rank. As in torch, unpickling runs arbitrary code: use it only between trusted ranks."""
    _check_initialized()
    _check_group(group)
    payload = _object_tensor(list(object_list)) if _D.rank() == int(src) else None
    size = _C.tensor([payload.numel() if payload is not None else 0], dtype=_C.dtype.int64)
    _D.broadcast(size, int(src))
    n = int(size.item())
    buf = payload if payload is not None else _C.zeros([n], dtype=_C.dtype.int64)
    _D.broadcast(buf, int(src))
    object_list[:] = _tensor_object(buf, n)


def all_gather_object(object_list, obj, group=None):  # noqa: F811
    """torch.distributed.all_gather_object: every rank's picklable object, on every rank (same
    caveat about unpickling as broadcast_object_list)."""
    _check_initialized()
    _check_group(group)
    n = _D.world_size()
    if len(object_list) != n:
        raise ValueError("all_gather_object: object_list has {} entries but the world has {} "
                         "ranks".format(len(object_list), n))
    mine = _object_tensor(obj)
    sizes = _D.all_gather(_C.tensor([mine.numel()], dtype=_C.dtype.int64))
    longest = max(int(sizes[i][0].item()) for i in range(n))
    padded = _C.zeros([longest], dtype=_C.dtype.int64)
    padded[:mine.numel()] = mine
    gathered = _D.all_gather(padded)
    for i in range(n):
        object_list[i] = _tensor_object(gathered[i], int(sizes[i][0].item()))


class _Done:
    def wait(self, timeout=None):
        return True

    def is_completed(self):
        return True


def _done(async_op):
    return _Done() if async_op else None

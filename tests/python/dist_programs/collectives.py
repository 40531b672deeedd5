"""attn.distributed's torch.distributed surface, checked by every rank against closed formulas of
(rank, world); run under mpirun by test_distributed_python.py. Prints "rank R ok" at the end."""
import attn as torch
import attn.distributed as dist

assert not dist.is_initialized()
try:
    dist.get_rank()
    raise SystemExit("get_rank before init_process_group did not raise")
except RuntimeError as e:
    assert "has not been initialized" in str(e)
try:
    dist.init_process_group("nccl")
    raise SystemExit("nccl did not raise")
except RuntimeError as e:
    assert "CUDA" in str(e)

dist.init_process_group("mpi")
r, n = dist.get_rank(), dist.get_world_size()
assert dist.is_initialized() and dist.get_backend() == "mpi"

t = torch.arange(4, dtype=torch.float32) + 10 * r
dist.all_reduce(t)
assert t.tolist() == [float(10 * n * (n - 1) // 2 + n * i) for i in range(4)], t
t = torch.full((3,), float(r))
dist.all_reduce(t, op=dist.ReduceOp.AVG)
assert abs(t[0].item() - (n - 1) / 2) < 1e-6
w = dist.all_reduce(torch.ones(2), async_op=True)
w.wait()

out = torch.zeros(2 * n)
dist.all_gather_into_tensor(out, torch.tensor([float(r), float(-r)]))
assert out.tolist() == [v for k in range(n) for v in (float(k), float(-k))], out
rs = torch.zeros(2)
dist.reduce_scatter_tensor(rs, torch.arange(2 * n, dtype=torch.float32))
assert rs.tolist() == [float(n * (2 * r)), float(n * (2 * r + 1))], rs
b = torch.full((2,), float(r))
dist.broadcast(b, src=n - 1)
assert b.tolist() == [float(n - 1)] * 2

# reduce / gather / scatter and picklable objects
t = torch.full((2,), float(r + 1))
dist.reduce(t, dst=0)
if r == 0:
    assert t.tolist() == [float(n * (n + 1) // 2)] * 2, t
lst = [torch.zeros(2) for _ in range(n)] if r == 0 else None
dist.gather(torch.full((2,), float(r)), lst, dst=0)
if r == 0:
    assert [x.tolist() for x in lst] == [[float(k)] * 2 for k in range(n)]
got = torch.zeros(3)
dist.scatter(got, [torch.full((3,), 7.0 + k) for k in range(n)] if r == n - 1 else None, src=n - 1)
assert got.tolist() == [7.0 + r] * 3, got
objs = [{"lr": 1e-3, "name": "rank"}, None] if r == 0 else [None, None]
dist.broadcast_object_list(objs, src=0)
assert objs == [{"lr": 1e-3, "name": "rank"}, None], objs
everyone = [None] * n
dist.all_gather_object(everyone, {"rank": r, "text": "x" * r})
assert everyone == [{"rank": k, "text": "x" * k} for k in range(n)], everyone

# point to point round the ring, blocking and not
send, got = torch.full((3,), float(r)), torch.zeros(3)
req = dist.irecv(got, src=(r - 1) % n)
dist.isend(send, dst=(r + 1) % n).wait()
req.wait()
assert got.tolist() == [float((r - 1) % n)] * 3

# ranks that disagree get a ValueError naming both shapes, and the world still works afterwards
if n > 1:
    try:
        dist.all_reduce(torch.zeros(2 if r == 0 else 3))
        raise SystemExit("mismatched all_reduce did not raise")
    except RuntimeError as e:  # as torch.distributed
        assert "differs across ranks" in str(e), e
dist.barrier()

# ring attention over the sequence: this rank's shard against the whole sequence's attention
import attn.nn.functional as F  # noqa: E402
g = torch.Generator().manual_seed(5)
q = torch.randn(2, 4, 8 * n, 16, generator=g)
k = torch.randn(2, 2, 8 * n, 16, generator=g)
v = torch.randn(2, 2, 8 * n, 16, generator=g)
full = F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=True)
Z = dist.Sharding.zigzag
mine = dist.ring_attention(*(dist.shard_sequence(x, 2, r, n, Z) for x in (q, k, v)),
                           is_causal=True, sharding=Z, enable_gqa=True)
want = dist.shard_sequence(full, 2, r, n, Z)
assert (mine - want).abs().max().item() < 1e-5
# with an additive mask: this rank's query rows against every key, in global key order
bias = torch.randn(8 * n, 8 * n, generator=g)
full = F.scaled_dot_product_attention(q, k, v, attn_mask=bias, enable_gqa=True)
mine = dist.ring_attention(*(dist.shard_sequence(x, 2, r, n, Z) for x in (q, k, v)),
                           sharding=Z, enable_gqa=True,
                           attn_mask=dist.shard_sequence(bias, 0, r, n, Z))
assert (mine - dist.shard_sequence(full, 2, r, n, Z)).abs().max().item() < 1e-5

dist.destroy_process_group()
print(f"rank {r} ok")

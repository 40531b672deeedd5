"""DistributedDataParallel's no_sync() and find_unused_parameters, and its errors, checked by
every rank against a single-process reference it computes itself; run under mpirun by
test_distributed_python.py. Prints "rank R ok" at the end."""
import attn as torch
import attn.distributed as dist
from attn import nn
from attn.nn.parallel import DistributedDataParallel as DDP

dist.init_process_group("mpi")
r, n = dist.get_rank(), dist.get_world_size()


class TwoHeads(nn.Module):
    def __init__(self):
        super().__init__()
        self.body = nn.Linear(4, 6)
        self.a = nn.Linear(6, 1)
        self.b = nn.Linear(6, 1)

    def forward(self, x, head):
        h = self.body(x).tanh()
        return (self.a if head == "a" else self.b)(h)


def build():
    torch.manual_seed(3)
    return TwoHeads()


g = torch.Generator().manual_seed(9)
X = torch.randn(4, 2 * n, 4, generator=g)
rows = slice(2 * r, 2 * r + 2)

# no_sync: two micro-batches accumulated locally, the second one synchronised, equals one
# process's accumulated gradient over the whole batch. (Head b is unused here, hence
# find_unused_parameters; its gradient is checked below.)
ref = build()
for k in range(2):
    (ref(X[k], "a") ** 2).mean().backward()
model = build()
ddp = DDP(model, find_unused_parameters=True)
with ddp.no_sync():
    (ddp(X[0][rows], "a") ** 2).mean().backward()
(ddp(X[1][rows], "a") ** 2).mean().backward()
for (name, p), q in zip(model.named_parameters(), ref.parameters()):
    if name.startswith("b."):
        continue
    err = (p.grad - q.grad).abs().max().item()
    assert err < 1e-5, (name, err)

# A head that gets no gradient: without find_unused_parameters the next forward says which.
model = build()
ddp = DDP(model)
(ddp(X[0][rows], "a") ** 2).mean().backward()
try:
    ddp(X[0][rows], "a")
    raise SystemExit("the unfinished reduction was not reported")
except RuntimeError as e:
    assert "b.weight" in str(e) and "find_unused_parameters" in str(e), e

# With it, the unused head counts as zeros and the step completes.
ref = build()
(ref(X[2], "a") ** 2).mean().backward()
model = build()
ddp = DDP(model, find_unused_parameters=True)
(ddp(X[2][rows], "a") ** 2).mean().backward()
assert (model.body.weight.grad - ref.body.weight.grad).abs().max().item() < 1e-5
assert model.b.weight.grad.abs().max().item() == 0.0
ddp(X[3][rows], "b")  # no error: the previous pass finished

dist.destroy_process_group()
print(f"rank {r} ok")

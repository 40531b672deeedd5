"""A small data-parallel training program in PyTorch's idiom, run by test_distributed_python.py
under mpirun twice: with `import torch` (PyTorch 1.13's gloo backend) and with attn in its place
(``python3 ddp_train.py attn``). Rank 0 prints the losses, a few collectives' results and weights;
the two runs must print the same lines."""
import importlib
import os
import sys

torch = importlib.import_module(sys.argv[1])
nn = torch.nn
dist = torch.distributed
DDP = torch.nn.parallel.DistributedDataParallel
# torch's env:// rendezvous, from what mpirun sets (attn reads mpirun's environment itself).
os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
os.environ.setdefault("RANK", os.environ.get("OMPI_COMM_WORLD_RANK", "0"))
os.environ.setdefault("WORLD_SIZE", os.environ.get("OMPI_COMM_WORLD_SIZE", "1"))
dist.init_process_group("gloo")
rank, world = dist.get_rank(), dist.get_world_size()
torch.manual_seed(0)
model = nn.Sequential(nn.Linear(8, 16), nn.GELU(), nn.Linear(16, 4))
ddp = DDP(model)
opt = torch.optim.AdamW(ddp.parameters(), lr=1e-2)
g = torch.Generator().manual_seed(1)
B = 3
X = torch.randn(5, B * world, 8, generator=g)
Y = torch.randn(5, B * world, 4, generator=g)
for step in range(5):
    xb, yb = X[step, rank * B:(rank + 1) * B], Y[step, rank * B:(rank + 1) * B]
    loss = ((ddp(xb) - yb) ** 2).mean()
    opt.zero_grad()
    loss.backward()
    opt.step()
    l = loss.detach().clone()
    dist.all_reduce(l)
    if rank == 0:
        print(f"step {step} loss {l.item() / world:.6f}")
t = torch.tensor([float(rank + 1)])
dist.all_reduce(t, op=dist.ReduceOp.MAX)
out = [torch.zeros(2) for _ in range(world)]
dist.all_gather(out, torch.tensor([float(rank), 2.0 * rank]))
if rank == 0:
    print("max", t.item(), "gather", [o.tolist() for o in out])
    print("keys", list(ddp.state_dict().keys())[:2])
    print("w", [round(v, 5) for v in model[0].weight[0, :4].tolist()])
dist.barrier()
dist.destroy_process_group()
if sys.argv[1] == "torch":
    # PyTorch 1.13's gloo threads sometimes abort the interpreter at exit ("terminate called
    # without an active exception"); the program's work is done and printed by now.
    sys.stdout.flush()
    os._exit(0)

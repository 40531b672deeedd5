"""A small regression network trained with SGD: TensorDataset, random_split, DataLoader with
shuffling, nn.Sequential of Linear/Tanh/SiLU, a step learning-rate schedule, and the tensor ops
that data handling uses (sort, argsort, cumsum, gather, clamp, where, chunk).

Written for attn's test suite; runs unchanged on PyTorch."""
import torch
import torch.nn as nn
from torch.utils.data import DataLoader, TensorDataset, random_split

torch.manual_seed(0)
x = torch.rand(96, 3) * 4 - 2
y = (x[:, :1] * x[:, 1:2]).tanh() + 0.5 * x[:, 2:].clamp(min=-1.0, max=1.0)
order = torch.argsort(y[:, 0], descending=True)
print("top rows", order[:5].tolist())
values, idx = torch.sort(y[:, 0])
print("sorted head", [round(v, 4) for v in values[:3].tolist()], idx[:3].tolist())
print("cumsum tail", round(float(torch.cumsum(y[:, 0], dim=0)[-1]), 4))
print("gather", [round(v, 4) for v in torch.gather(x, 1, torch.argmax(x, dim=1, keepdim=True))[:3, 0].tolist()])
first, second = torch.chunk(y, 2, dim=0)
print("chunks", tuple(first.shape), tuple(second.shape), torch.where(first > 0, 1, 0).sum().item())

train_set, val_set = random_split(TensorDataset(x, y), [72, 24])
train_loader = DataLoader(train_set, batch_size=16, shuffle=True, drop_last=True)
val_loader = DataLoader(val_set, batch_size=8)
model = nn.Sequential(nn.Linear(3, 16), nn.Tanh(), nn.Linear(16, 16), nn.SiLU(), nn.Linear(16, 1))
opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9, weight_decay=1e-4)
sched = torch.optim.lr_scheduler.StepLR(opt, step_size=3, gamma=0.5)

for epoch in range(6):
    model.train()
    total = 0.0
    for xb, yb in train_loader:
        loss = ((model(xb) - yb) ** 2).mean()
        opt.zero_grad()
        loss.backward()
        opt.step()
        total += loss.item()
    sched.step()
    model.eval()
    with torch.no_grad():
        val = sum(((model(xb) - yb) ** 2).sum().item() for xb, yb in val_loader) / len(val_set)
    print(f"epoch {epoch}: train {total / len(train_loader):.4f} val {val:.4f} "
          f"lr {sched.get_last_lr()[0]:.4f}")

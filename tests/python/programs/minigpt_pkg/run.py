"""Trains the package's GPT on characters of a text file. Usage: python -m minigpt_pkg.run DATA"""
import random
import sys

import numpy as np
import torch
from torch.utils.data import Dataset

from .model import GPT
from .trainer import Trainer


def set_seed(seed):
    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)
    torch.cuda.manual_seed_all(seed)


class CharDataset(Dataset):
    def __init__(self, data, block_size):
        chars = sorted(list(set(data)))
        self.stoi = {ch: i for i, ch in enumerate(chars)}
        self.itos = {i: ch for i, ch in enumerate(chars)}
        self.vocab_size, self.block_size, self.data = len(chars), block_size, data

    def __len__(self):
        return len(self.data) - self.block_size

    def __getitem__(self, idx):
        chunk = self.data[idx:idx + self.block_size + 1]
        dix = [self.stoi[s] for s in chunk]
        x = torch.tensor(dix[:-1], dtype=torch.long)
        y = torch.tensor(dix[1:], dtype=torch.long)
        return x, y


def main():
    set_seed(3407)
    with open(sys.argv[1], encoding="utf-8") as f:
        text = f.read()[:10000]
    ds = CharDataset(text, block_size=16)
    cfg = dict(vocab_size=ds.vocab_size, block_size=16, n_layer=2, n_head=2, n_embd=32,
               embd_pdrop=0.1, resid_pdrop=0.1, attn_pdrop=0.1)
    model = GPT(cfg)
    tc = dict(batch_size=8, num_workers=0, max_iters=25, learning_rate=5e-4, betas=(0.9, 0.95),
              weight_decay=0.1, grad_norm_clip=1.0)
    trainer = Trainer(tc, model, ds)

    def batch_end_callback(trainer):
        if trainer.iter_num % 5 == 0:
            print(f"iter {trainer.iter_num}: train loss {trainer.loss.item():.5f}")

    trainer.add_callback("on_batch_end", batch_end_callback)
    trainer.run()
    model.eval()
    with torch.no_grad():
        context = "First"
        x = torch.tensor([ds.stoi[s] for s in context], dtype=torch.long)[None, ...]
        y = model.generate(x, 12, temperature=1.0, do_sample=False, top_k=10)[0]
        print("greedy", "".join(ds.itos[int(i)] for i in y))


if __name__ == "__main__":
    main()

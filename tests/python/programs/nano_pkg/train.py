"""Trains the GPT of model.py on a uint16 token file (np.memmap), with a cosine schedule set
through param_groups, gradient clipping, a checkpoint written with torch.save and resumed with
torch.load. Usage: python -m nano_pkg.train DATA OUT_DIR [flash]"""
import math
import os
import sys
import time
from contextlib import nullcontext

import numpy as np
import torch

from .model import GPT, GPTConfig

batch_size, block_size, max_iters, eval_interval, eval_iters = 6, 32, 24, 8, 3
learning_rate, min_lr, warmup_iters, lr_decay_iters = 1e-3, 1e-4, 4, 24
weight_decay, beta1, beta2, grad_clip = 1e-1, 0.9, 0.95, 1.0
device = "cuda" if torch.cuda.is_available() else "cpu"
device_type = "cuda" if "cuda" in device else "cpu"
dtype = "float32"


def main():
    text_path, out_dir = sys.argv[1], sys.argv[2]
    flash = len(sys.argv) > 3 and sys.argv[3] == "flash"
    os.makedirs(out_dir, exist_ok=True)
    torch.manual_seed(1337)
    torch.backends.cuda.matmul.allow_tf32 = True
    torch.backends.cudnn.allow_tf32 = True
    ptdtype = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}[dtype]
    ctx = nullcontext() if device_type == "cpu" else torch.amp.autocast(device_type=device_type,
                                                                      dtype=ptdtype)
    with open(text_path, encoding="utf-8") as f:
        text = f.read()[:30000]
    chars = sorted(set(text))
    stoi = {c: i for i, c in enumerate(chars)}
    ids = np.array([stoi[c] for c in text], dtype=np.uint16)
    n = int(0.9 * len(ids))
    ids[:n].tofile(os.path.join(out_dir, "train.bin"))
    ids[n:].tofile(os.path.join(out_dir, "val.bin"))

    def get_batch(split):
        data = np.memmap(os.path.join(out_dir, f"{split}.bin"), dtype=np.uint16, mode="r")
        ix = torch.randint(len(data) - block_size, (batch_size,))
        x = torch.stack([torch.from_numpy((data[i:i + block_size]).astype(np.int64)) for i in ix])
        y = torch.stack([torch.from_numpy((data[i + 1:i + 1 + block_size]).astype(np.int64))
                         for i in ix])
        if device_type == "cuda":
            x, y = x.pin_memory().to(device, non_blocking=True), y.pin_memory().to(device,
                                                                                  non_blocking=True)
        else:
            x, y = x.to(device), y.to(device)
        return x, y

    model_args = dict(n_layer=2, n_head=2, n_embd=32, block_size=block_size, bias=False,
                      vocab_size=len(chars), dropout=0.0, flash=flash)
    model = GPT(GPTConfig(**model_args))
    model.to(device)
    scaler = torch.cuda.amp.GradScaler(enabled=(dtype == "float16"))
    optimizer = model.configure_optimizers(weight_decay, learning_rate, (beta1, beta2), device_type)
    if flash and hasattr(torch, "compile"):  # torch 2 and attn (attn returns the model)
        model = torch.compile(model)

    @torch.no_grad()
    def estimate_loss():
        out = {}
        model.eval()
        for split in ["train", "val"]:
            losses = torch.zeros(eval_iters)
            for k in range(eval_iters):
                X, Y = get_batch(split)
                with ctx:
                    logits, loss = model(X, Y)
                losses[k] = loss.item()
            out[split] = losses.mean()
        model.train()
        return out

    def get_lr(it):
        if it < warmup_iters:
            return learning_rate * (it + 1) / (warmup_iters + 1)
        if it > lr_decay_iters:
            return min_lr
        decay_ratio = (it - warmup_iters) / (lr_decay_iters - warmup_iters)
        coeff = 0.5 * (1.0 + math.cos(math.pi * decay_ratio))
        return min_lr + coeff * (learning_rate - min_lr)

    def train(iter_num, stop, X, Y):
        best_val_loss = 1e9
        t0 = time.time()
        while True:
            lr = get_lr(iter_num)
            for param_group in optimizer.param_groups:
                param_group["lr"] = lr
            if iter_num % eval_interval == 0:
                losses = estimate_loss()
                print(f"step {iter_num}: train loss {losses['train']:.4f}, "
                      f"val loss {losses['val']:.4f}")
                if losses["val"] < best_val_loss:
                    best_val_loss = losses["val"]
                    checkpoint = {"model": model.state_dict(), "optimizer": optimizer.state_dict(),
                                  "model_args": model_args, "iter_num": iter_num,
                                  "best_val_loss": best_val_loss, "config": {"lr": learning_rate}}
                    torch.save(checkpoint, os.path.join(out_dir, "ckpt.pt"))
            if iter_num == stop:
                return X, Y
            with ctx:
                logits, loss = model(X, Y)
            X, Y = get_batch("train")
            scaler.scale(loss).backward()
            if grad_clip != 0.0:
                scaler.unscale_(optimizer)
                torch.nn.utils.clip_grad_norm_(model.parameters(), grad_clip)
            scaler.step(optimizer)
            scaler.update()
            optimizer.zero_grad(set_to_none=True)
            dt, t0 = time.time() - t0, time.time()
            iter_num += 1

    X, Y = get_batch("train")
    X, Y = train(0, 16, X, Y)
    # Resume from the checkpoint, as train.py's init_from='resume' does.
    checkpoint = torch.load(os.path.join(out_dir, "ckpt.pt"), map_location=device)
    print("resuming from", checkpoint["iter_num"], "with", sorted(checkpoint["model_args"]))
    model = GPT(GPTConfig(**checkpoint["model_args"]))
    model.load_state_dict(checkpoint["model"])
    optimizer = model.configure_optimizers(weight_decay, learning_rate, (beta1, beta2), device_type)
    optimizer.load_state_dict(checkpoint["optimizer"])
    train(checkpoint["iter_num"], max_iters, X, Y)
    model.eval()
    model.crop_block_size(16)
    torch.manual_seed(42)
    y = model.generate(torch.zeros((1, 1), dtype=torch.long), 10, temperature=0.8, top_k=5)
    print("sample", "".join(chars[i] for i in y[0].tolist()))


if __name__ == "__main__":
    main()

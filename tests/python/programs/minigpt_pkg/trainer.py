"""A Trainer with a DataLoader over a random sampler and callbacks, as minGPT's."""
import time
from collections import defaultdict

import torch
from torch.utils.data.dataloader import DataLoader


class Trainer:
    def __init__(self, tc, model, train_dataset):
        self.tc, self.model, self.train_dataset = tc, model, train_dataset
        self.callbacks = defaultdict(list)
        self.device = "cuda" if torch.cuda.is_available() else "cpu"
        self.model = self.model.to(self.device)
        self.iter_num, self.iter_time, self.iter_dt = 0, 0.0, 0.0

    def add_callback(self, onevent, callback):
        self.callbacks[onevent].append(callback)

    def trigger_callbacks(self, onevent):
        for callback in self.callbacks.get(onevent, []):
            callback(self)

    def run(self):
        model, tc = self.model, self.tc
        self.optimizer = model.configure_optimizers(tc)
        train_loader = DataLoader(
            self.train_dataset,
            sampler=torch.utils.data.RandomSampler(self.train_dataset, replacement=True,
                                                   num_samples=int(1e10)),
            shuffle=False, pin_memory=True, batch_size=tc["batch_size"],
            num_workers=tc["num_workers"])
        model.train()
        self.iter_time = time.time()
        data_iter = iter(train_loader)
        while True:
            try:
                batch = next(data_iter)
            except StopIteration:
                data_iter = iter(train_loader)
                batch = next(data_iter)
            batch = [t.to(self.device) for t in batch]
            x, y = batch
            logits, self.loss = model(x, y)
            model.zero_grad(set_to_none=True)
            self.loss.backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), tc["grad_norm_clip"])
            self.optimizer.step()
            self.trigger_callbacks("on_batch_end")
            self.iter_num += 1
            tnow = time.time()
            self.iter_dt, self.iter_time = tnow - self.iter_time, tnow
            if tc["max_iters"] is not None and self.iter_num >= tc["max_iters"]:
                break

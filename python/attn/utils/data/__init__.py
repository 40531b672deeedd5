"""attn.utils.data: torch.utils.data's Dataset, DataLoader and samplers.

Shuffling draws from attn's generator exactly as torch 1.13 draws from its own, so a DataLoader
with the same seed yields the same batches as PyTorch's. num_workers > 0 is accepted and loads in
the calling process (the batches and their order are those of torch's worker processes)."""
from .dataloader import DataLoader, default_collate, default_convert, get_worker_info
from .dataset import (ConcatDataset, Dataset, IterableDataset, Subset, TensorDataset,
                      random_split)
from .sampler import (BatchSampler, RandomSampler, Sampler, SequentialSampler,
                      SubsetRandomSampler)

__all__ = ["BatchSampler", "ConcatDataset", "DataLoader", "Dataset", "IterableDataset",
           "RandomSampler", "Sampler", "SequentialSampler", "Subset", "SubsetRandomSampler",
           "TensorDataset", "default_collate", "default_convert", "get_worker_info",
           "random_split"]

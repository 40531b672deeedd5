"""A nanoGPT-style model.py and train.py, written for attn's test suite: runs unchanged on
PyTorch; the test runs it on attn with only the imports changed."""

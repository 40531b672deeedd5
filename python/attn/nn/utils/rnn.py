"""torch.nn.utils.rnn's padding helpers: pad_sequence and unpad_sequence (attn has no packed
sequences or recurrent layers)."""
from ... import _C


def pad_sequence(sequences, batch_first=False, padding_value=0.0, padding_side="right"):
    """torch.nn.utils.rnn.pad_sequence: tensors (L_i, *) stacked into (L_max, B, *) or
    (B, L_max, *), padded with padding_value on the right (or the left)."""
    seqs = list(sequences)
    if not seqs:
        raise RuntimeError("received an empty list of sequences")
    if padding_side not in ("right", "left"):
        raise ValueError("Expected padding_side to be one of left or right, but got {}."
                         .format(padding_side))
    longest = max(s.shape[0] for s in seqs)
    padded = []
    for s in seqs:
        if s.shape[1:] != seqs[0].shape[1:]:
            raise RuntimeError("The size of tensor a ({}) must match the size of tensor b "
                               "({})".format(tuple(s.shape[1:]), tuple(seqs[0].shape[1:])))
        missing = longest - s.shape[0]
        if missing:
            fill = _C.full((missing,) + tuple(s.shape[1:]), padding_value, dtype=s.dtype)
            s = _C.cat([s, fill] if padding_side == "right" else [fill, s], 0)
        padded.append(s)
    return _C.stack(padded, 0 if batch_first else 1)

def unpad_sequence(padded_sequences, lengths, batch_first=False):
    """The sequences of a right-padded batch, each cut to its length."""
    x = padded_sequences if batch_first else padded_sequences.transpose(0, 1)
    return [x[i, :int(n)] for i, n in enumerate(lengths)]

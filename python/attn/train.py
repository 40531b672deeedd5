"""attn.train: the training loop of ``attn train`` (attn::train::train, include/attn/train.h).

``train(data=..., out=..., max_iters=..., ...)`` runs the very loop the CLI runs: a character-level
GPT trained on a UTF-8 text file, with evaluations, crash-safe checkpoints (OUT/model.safetensors,
OUT/ckpt.safetensors, OUT/loss.png), ``resume=True``, the checks of non-finite values
(``on_nonfinite="stop"`` or ``"skip"``) and, under mpirun, data or context parallelism. The keyword
arguments are the flags of ``attn train`` with ``_`` for ``-`` (``--max-iters`` is ``max_iters``,
``--bias``/``--no-bias`` is ``bias=True``/``False``); the same values print the same losses and
write the same checkpoint files, byte for byte. The lines the loop prints go to ``sys.stdout``
(a line every ``log_interval`` steps instead of the CLI's progress bar). It returns a
``TrainResult`` (``history``: a ``TrainEval(step, train_loss, val_loss)`` per evaluation,
``train_loss``, ``val_loss``, ``ms_per_iter``, ``tokens_per_s``, ``skipped``) and raises
``ValueError`` (attn._C.AttnError) for bad options, data or checkpoints and for a non-finite loss
under ``on_nonfinite="stop"``, the last checkpoint kept. Ctrl-C (SIGINT, or any signal whose
Python handler raises) stops the run before its next step with that exception
(``KeyboardInterrupt``), the last checkpoint kept: ``resume=True`` goes on from it."""

from ._C.train import TrainEval, TrainResult, train

__all__ = ["TrainEval", "TrainResult", "train"]

"""attn.backends: torch.backends' switches, settable and read back, with nothing to switch (attn
has no CUDA, cuDNN or MPS backend)."""


class _Flags:
    def __init__(self, name, **flags):
        object.__setattr__(self, "_name", name)
        for k, v in flags.items():
            object.__setattr__(self, k, v)

    def __repr__(self):
        return "<attn.backends flags {}>".format(self._name)


class _Cuda:
    def __init__(self):
        self.matmul = _Flags("cuda.matmul", allow_tf32=False,
                             allow_fp16_reduced_precision_reduction=True,
                             allow_bf16_reduced_precision_reduction=True)

    @staticmethod
    def is_built():
        return False

    def flash_sdp_enabled(self):
        return False

    def enable_flash_sdp(self, enabled):
        pass

    def enable_mem_efficient_sdp(self, enabled):
        pass

    def enable_math_sdp(self, enabled):
        pass


class _Cudnn:
    enabled = True
    allow_tf32 = True
    benchmark = False
    deterministic = False

    @staticmethod
    def is_available():
        return False

    @staticmethod
    def version():
        return None


class _Mps:
    @staticmethod
    def is_available():
        return False

    @staticmethod
    def is_built():
        return False


cuda = _Cuda()
cudnn = _Cudnn()
mps = _Mps()

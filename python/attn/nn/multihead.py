"""torch.nn.MultiheadAttention over the C++ implementation (split from modules.py)."""
from .. import _C
from .modules import Module, NonDynamicallyQuantizableLinear, Parameter


class MultiheadAttention(Module):
    """torch.nn.MultiheadAttention over the C++ implementation; parameters share its storage and
    carry PyTorch's names (in_proj_weight, in_proj_bias, out_proj.weight, out_proj.bias, or
    q_proj_weight / k_proj_weight / v_proj_weight when kdim or vdim differ from embed_dim)."""

    def __init__(self, embed_dim, num_heads, dropout=0.0, bias=True, add_bias_kv=False,
                 add_zero_attn=False, kdim=None, vdim=None, batch_first=False, device=None,
                 dtype=None):
        super().__init__()
        if add_bias_kv or add_zero_attn:
            raise ValueError("[MultiheadAttention] add_bias_kv and add_zero_attn are not supported")
        impl = _C.modules.MultiheadAttention(embed_dim, num_heads, float(dropout), bool(bias),
                                             kdim, vdim, bool(batch_first))
        object.__setattr__(self, "_impl", impl)
        self.embed_dim = embed_dim
        self.kdim = kdim if kdim is not None else embed_dim
        self.vdim = vdim if vdim is not None else embed_dim
        self._qkv_same_embed_dim = self.kdim == embed_dim and self.vdim == embed_dim
        self.num_heads = num_heads
        self.dropout = float(dropout)
        self.batch_first = batch_first
        self.head_dim = impl.head_dim
        if self._qkv_same_embed_dim:
            self.in_proj_weight = Parameter(impl.in_proj_weight)
            self.register_parameter("q_proj_weight", None)
            self.register_parameter("k_proj_weight", None)
            self.register_parameter("v_proj_weight", None)
        else:
            self.q_proj_weight = Parameter(impl.q_proj_weight)
            self.k_proj_weight = Parameter(impl.k_proj_weight)
            self.v_proj_weight = Parameter(impl.v_proj_weight)
            self.register_parameter("in_proj_weight", None)
        if bias:
            self.in_proj_bias = Parameter(impl.in_proj_bias)
        else:
            self.register_parameter("in_proj_bias", None)
        out_proj = NonDynamicallyQuantizableLinear.__new__(NonDynamicallyQuantizableLinear)
        Module.__init__(out_proj)
        out_proj.in_features = out_proj.out_features = embed_dim
        out_proj.weight = Parameter(impl.out_proj_weight)
        if bias:
            out_proj.bias = Parameter(impl.out_proj_bias)
        else:
            out_proj.register_parameter("bias", None)
        self.out_proj = out_proj
        self.bias_k = self.bias_v = None
        self.add_zero_attn = False

    def forward(self, query, key, value, key_padding_mask=None, need_weights=True,
                attn_mask=None, average_attn_weights=True, is_causal=False):
        impl = self._impl
        impl.train(self.training)
        # The current Parameters (they may have been reassigned since construction).
        impl._set_parameters(self.in_proj_weight, self.q_proj_weight, self.k_proj_weight,
                             self.v_proj_weight, self.in_proj_bias, self.out_proj.weight,
                             self.out_proj.bias, float(self.dropout))
        return self._impl.forward(query, key, value, key_padding_mask, need_weights, attn_mask,
                                  average_attn_weights, is_causal)

    def __deepcopy__(self, memo):
        """A copy with copies of the parameters (torch's deepcopy), made without drawing from the
        random generator: the C++ module is built anew (its initial weights are replaced by the
        copied Parameters at the next forward) with the generator's state put back after."""
        import copy

        from .. import get_rng_state, set_rng_state
        state = get_rng_state()
        try:
            new = MultiheadAttention(
                self.embed_dim, self.num_heads, self.dropout, self.in_proj_bias is not None,
                kdim=None if self.kdim == self.embed_dim else self.kdim,
                vdim=None if self.vdim == self.embed_dim else self.vdim,
                batch_first=self.batch_first)
        finally:
            set_rng_state(state)
        memo[id(self)] = new
        for k, v in self.__dict__.items():
            if k != "_impl":
                object.__setattr__(new, k, copy.deepcopy(v, memo))
        return new

    def extra_repr(self):
        return ""

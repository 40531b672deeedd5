"""ReduceLROnPlateau, nn.utils.rnn.pad_sequence / unpad_sequence and parameters_to_vector /
vector_to_parameters against torch 1.13: the same program on both, the same results."""
import numpy as np
import pytest

torch = pytest.importorskip("torch")

import attn  # noqa: E402


def plateau(M, **kw):
    w = M.nn.Parameter(M.ones(3))
    b = M.nn.Parameter(M.zeros(2))
    opt = M.optim.SGD([{"params": [w]}, {"params": [b], "lr": 0.05}], lr=0.1)
    sched = M.optim.lr_scheduler.ReduceLROnPlateau(opt, **kw)
    metrics = [1.0, 0.9, 0.95, 0.91, 0.92, 0.93, 0.899, 0.97, 0.98, 0.99, 1.0, 0.5, 0.6, 0.7,
               0.8, 0.9, 1.0, 1.1, 1.2, 1.3]
    lrs = []
    for m in metrics:
        (w.sum() + b.sum()).backward()
        opt.step()
        opt.zero_grad()
        sched.step(m if kw.get("mode") != "max" else -m)
        lrs.append([g["lr"] for g in opt.param_groups])
    state = {k: v for k, v in sched.state_dict().items() if k != "_last_lr"}
    return lrs, state, w.detach().tolist()


@pytest.mark.parametrize("kw", [{"patience": 2}, {"patience": 1, "cooldown": 2, "factor": 0.5},
                                {"patience": 0, "threshold_mode": "abs", "threshold": 0.05,
                                 "min_lr": [0.02, 0.0]},
                                {"mode": "max", "patience": 1, "eps": 0.01}])
def test_reduce_lr_on_plateau(kw):
    assert plateau(attn, **kw) == plateau(torch, **kw)


def test_reduce_lr_on_plateau_errors():
    for M in (torch, attn):
        opt = M.optim.SGD([M.nn.Parameter(M.ones(1))], lr=0.1)
        with pytest.raises(ValueError, match="Factor should be < 1.0"):
            M.optim.lr_scheduler.ReduceLROnPlateau(opt, factor=1.0)
        with pytest.raises(ValueError, match="unknown"):
            M.optim.lr_scheduler.ReduceLROnPlateau(opt, mode="median")
        with pytest.raises(ValueError, match="expected 1 min_lrs"):
            M.optim.lr_scheduler.ReduceLROnPlateau(opt, min_lr=[0.1, 0.2])


def padding(M):
    rs = np.random.RandomState(0)
    seqs = [M.tensor(rs.standard_normal((n, 3)).astype(np.float32), requires_grad=True)
            for n in (4, 1, 3)]
    ids = [M.tensor([5, 6, 7]), M.tensor([8]), M.tensor([9, 10])]
    a = M.nn.utils.rnn.pad_sequence(seqs)
    b = M.nn.utils.rnn.pad_sequence(seqs, batch_first=True, padding_value=-1.5)
    c = M.nn.utils.rnn.pad_sequence(ids, batch_first=True, padding_value=0)
    (a * a).sum().backward()
    back = M.nn.utils.rnn.unpad_sequence(b, M.tensor([4, 1, 3]), batch_first=True)
    return [tuple(a.shape), a.tolist(), b.tolist(), c.tolist(), str(c.dtype).split(".")[-1],
            [s.grad.tolist() for s in seqs], [x.tolist() for x in back]]


def test_pad_sequence():
    assert padding(attn) == padding(torch)
    for M in (torch, attn):
        with pytest.raises(RuntimeError):
            M.nn.utils.rnn.pad_sequence([M.ones(2, 3), M.ones(2, 4)])


def vectors(M):
    M.manual_seed(0)
    net = M.nn.Sequential(M.nn.Linear(3, 4), M.nn.Linear(4, 2))
    v = M.nn.utils.parameters_to_vector(net.parameters())
    (v * v).sum().backward()
    grads = [p.grad.tolist() for p in net.parameters()]
    M.nn.utils.vector_to_parameters(M.arange(v.numel()).float() / 10, net.parameters())
    return [tuple(v.shape), v.tolist(), grads, [p.tolist() for p in net.parameters()]]


def test_parameters_to_vector_and_back():
    assert vectors(attn) == vectors(torch)
    with pytest.raises(RuntimeError):
        attn.nn.utils.vector_to_parameters(attn.ones(3), [attn.nn.Parameter(attn.ones(2))])
    with pytest.raises(TypeError):
        attn.nn.utils.vector_to_parameters([1.0], [attn.nn.Parameter(attn.ones(1))])


def sequential(M, schedulers, milestones):
    sch = M.optim.lr_scheduler
    w, b = M.nn.Parameter(M.ones(2)), M.nn.Parameter(M.ones(1))
    opt = M.optim.AdamW([{"params": [w]}, {"params": [b], "lr": 3e-4}], lr=1e-3)
    s = sch.SequentialLR(opt, [make(sch, opt) for make in schedulers], milestones=milestones)
    lrs = [[g["lr"] for g in opt.param_groups]]
    for _ in range(30):
        (w.sum() + b.sum()).backward()
        opt.step()
        opt.zero_grad()
        s.step()
        lrs.append([g["lr"] for g in opt.param_groups] + s.get_last_lr())
    state = s.state_dict()
    s.load_state_dict(state)  # a round trip keeps the schedule
    return lrs, s.last_epoch, w.tolist(), sorted(state), s.get_last_lr()


WARMUP_COSINE = ([lambda sch, o: sch.LinearLR(o, 0.01, 1.0, 5),
                  lambda sch, o: sch.CosineAnnealingLR(o, T_max=25, eta_min=1e-5)], [5])
FOUR = ([lambda sch, o: sch.LambdaLR(o, lambda e: 1.0 / (e + 1)),
         lambda sch, o: sch.CosineAnnealingLR(o, T_max=12, eta_min=1e-5),
         lambda sch, o: sch.ConstantLR(o, 0.5, 3),
         lambda sch, o: sch.MultiStepLR(o, [2, 4], 0.5)], [5, 17, 22])


@pytest.mark.filterwarnings("ignore::UserWarning")  # torch's step(0) warns of its epoch argument
@pytest.mark.parametrize("case", [WARMUP_COSINE, FOUR])
def test_sequential_lr(case):
    lrs_a, last_a, w_a, keys_a, after_a = sequential(attn, *case)
    lrs_t, last_t, w_t, keys_t, after_t = sequential(torch, *case)
    assert lrs_a == lrs_t and last_a == last_t  # the same double arithmetic
    assert keys_a == keys_t and after_a == after_t
    np.testing.assert_allclose(w_a, w_t, rtol=1e-6)


def test_sequential_lr_errors():
    for M in (torch, attn):
        sch = M.optim.lr_scheduler
        opt = M.optim.SGD([M.nn.Parameter(M.ones(1))], lr=0.1)
        other = M.optim.SGD([M.nn.Parameter(M.ones(1))], lr=0.1)
        with pytest.raises(ValueError, match="same optimizer"):
            sch.SequentialLR(opt, [sch.StepLR(opt, 2), sch.StepLR(other, 2)], [3])
        with pytest.raises(ValueError, match="one more than the number of milestone"):
            sch.SequentialLR(opt, [sch.StepLR(opt, 2), sch.StepLR(opt, 2)], [3, 4])


PY_SCHEDULERS = [
    lambda sch, o: sch.PolynomialLR(o, total_iters=12, power=2.0),
    lambda sch, o: sch.MultiplicativeLR(o, lambda e: 0.95),
    lambda sch, o: sch.CosineAnnealingWarmRestarts(o, T_0=4, T_mult=2, eta_min=1e-5),
    lambda sch, o: sch.ChainedScheduler([sch.ExponentialLR(o, 0.9),
                                         sch.PolynomialLR(o, total_iters=20)]),
    lambda sch, o: sch.CyclicLR(o, base_lr=0.01, max_lr=[0.1, 0.2], step_size_up=3,
                                step_size_down=5, mode="triangular2"),
    lambda sch, o: sch.CyclicLR(o, 0.01, 0.1, step_size_up=4, mode="exp_range", gamma=0.9,
                                base_momentum=[0.7, 0.75], max_momentum=0.95),
    lambda sch, o: sch.CyclicLR(o, [0.02, 0.01], 0.1, step_size_up=2,
                                scale_fn=lambda x: 0.5 ** x, scale_mode="iterations",
                                cycle_momentum=False),
]


def stepped(M, make, epochs=None):
    w, b = M.nn.Parameter(M.ones(2)), M.nn.Parameter(M.ones(1))
    opt = M.optim.SGD([{"params": [w]}, {"params": [b], "lr": 0.3}], lr=1.0, momentum=0.9)
    s = make(M.optim.lr_scheduler, opt)
    lrs = [s.get_last_lr()]
    for i in range(25):
        (w.sum() * b.sum()).backward()
        opt.step()
        opt.zero_grad()
        s.step() if epochs is None else s.step(epochs[i])
        lrs.append([g["lr"] for g in opt.param_groups] + s.get_last_lr()
                   + [g["momentum"] for g in opt.param_groups])  # CyclicLR cycles it
    return lrs, w.tolist()


@pytest.mark.parametrize("make", PY_SCHEDULERS)
def test_python_schedulers(make):
    (lrs_a, w_a), (lrs_t, w_t) = stepped(attn, make), stepped(torch, make)
    assert lrs_a == lrs_t
    np.testing.assert_allclose(w_a, w_t, rtol=1e-6)


def test_cyclic_lr_errors_and_other_optimizers():
    for M in (torch, attn):
        p = [M.nn.Parameter(M.ones(2))]
        with pytest.raises(ValueError, match="optimizer must support momentum"):
            M.optim.lr_scheduler.CyclicLR(M.optim.Adam(p), 0.01, 0.1)
        with pytest.raises(ValueError, match="mode is invalid and scale_fn is None"):
            M.optim.lr_scheduler.CyclicLR(M.optim.SGD(p, lr=0.1), 0.01, 0.1, mode="sine")
        with pytest.raises(ValueError, match="expected 1 values for max_lr, got 2"):
            M.optim.lr_scheduler.CyclicLR(M.optim.SGD(p, lr=0.1), 0.01, [0.1, 0.2])
        with pytest.raises(TypeError, match="is not an Optimizer"):
            M.optim.lr_scheduler.CyclicLR(object(), 0.01, 0.1)

    def run(M):  # RMSprop's momentum cycles too, and reaches its steps
        w = M.nn.Parameter(M.ones(3))
        opt = M.optim.RMSprop([w], lr=0.01, momentum=0.9)
        s = M.optim.lr_scheduler.CyclicLR(opt, 0.001, 0.01, step_size_up=3)
        out = []
        for _ in range(8):
            (w * w).sum().backward()
            opt.step()
            opt.zero_grad()
            s.step()
            out.append((opt.param_groups[0]["lr"], opt.param_groups[0]["momentum"]))
        return out, w.tolist()
    (a, wa), (t, wt) = run(attn), run(torch)
    assert a == t
    np.testing.assert_allclose(wa, wt, rtol=1e-6)


@pytest.mark.filterwarnings("ignore::UserWarning")
def test_warm_restarts_with_fractional_epochs_and_in_sequential_lr():
    epochs = [i / 3 for i in range(1, 26)]
    make = PY_SCHEDULERS[2]
    assert stepped(attn, make, epochs)[0] == stepped(torch, make, epochs)[0]
    case = ([lambda sch, o: sch.LinearLR(o, 0.1, 1.0, 4),
             lambda sch, o: sch.PolynomialLR(o, total_iters=10, power=1.5),
             lambda sch, o: sch.CosineAnnealingWarmRestarts(o, T_0=3)], [4, 15])
    a, t = sequential(attn, *case), sequential(torch, *case)
    assert a[0] == t[0] and a[1] == t[1]
    for M in (torch, attn):
        opt = M.optim.SGD([M.nn.Parameter(M.ones(1))], lr=0.1)
        with pytest.raises(ValueError, match="positive integer T_0"):
            M.optim.lr_scheduler.CosineAnnealingWarmRestarts(opt, T_0=0)

"""attn.optim against torch.optim 1.13: Adam, AdamW, SGD, RMSprop and Adagrad step for step over parameter groups
with their own options, the structure of state_dict and loading each other's state, the lr
schedulers' sequences, clip_grad_norm_ / clip_grad_value_, and the errors torch raises."""
import math
import platform

import numpy as np
import pytest
import torch

import attn
import attn.optim.lr_scheduler  # noqa: F401  (as torch programs import it)
from conftest import to_attn


def A(t):
    return to_attn(t)


def T(a):  # attn -> torch (a copy)
    return torch.from_numpy(np.array(a.numpy(), copy=True))


def close(a, t, rtol=1e-5, atol=1e-6):
    np.testing.assert_allclose(np.asarray(a.detach().numpy(), dtype=np.float64),
                               t.detach().double().numpy(), rtol=rtol, atol=atol)


SHAPES = [(6, 4), (4,), (3, 5, 2), (5,)]


def make_params(seed=0):
    tp = [torch.randn(*s, generator=torch.Generator().manual_seed(seed + i)).requires_grad_(True)
          for i, s in enumerate(SHAPES)]
    ap = [A(p).requires_grad_(True) for p in tp]
    return tp, ap


def grads_for(step, tp, ap, skip=()):
    for i, (t, a) in enumerate(zip(tp, ap)):
        if (step, i) in skip:  # no gradient: the parameter is skipped this step
            t.grad, a.grad = None, None
            continue
        g = torch.randn(t.shape, generator=torch.Generator().manual_seed(1000 * step + i))
        t.grad, a.grad = g, A(g)


def groups_of(params, group_options):
    """[{'params': [params[i] ...], **options}] from [([indices], options)]."""
    return [dict(options, params=[params[i] for i in idx]) for idx, options in group_options]


CASES = {
    "adam_l2_groups": ("Adam", dict(lr=1e-2, weight_decay=0.1),
                       [([0, 2], {}), ([1, 3], dict(lr=3e-2, betas=(0.8, 0.9), eps=1e-6,
                                                   weight_decay=0.0))]),
    "adam_amsgrad": ("Adam", dict(lr=5e-2, amsgrad=True, weight_decay=0.01),
                     [([0, 1, 2, 3], {})]),
    "adamw_groups": ("AdamW", dict(lr=1e-2, betas=(0.9, 0.95)),
                     [([0, 2], dict(weight_decay=0.1)),
                      ([1, 3], dict(weight_decay=0.0, lr=2e-2, eps=1e-5))]),
    "adamw_amsgrad_groups": ("AdamW", dict(lr=1e-2, amsgrad=True),
                             [([0], dict(weight_decay=0.5)), ([1, 2, 3], dict(amsgrad=False))]),
    "adam_maximize": ("Adam", dict(lr=1e-2, weight_decay=0.1, maximize=True),
                      [([0, 1, 2, 3], {})]),
    "adamw_maximize_group": ("AdamW", dict(lr=1e-2),
                             [([0, 1], {}), ([2, 3], dict(maximize=True, amsgrad=True))]),
    "sgd_plain": ("SGD", dict(lr=0.1), [([0, 1, 2, 3], {})]),
    "sgd_maximize": ("SGD", dict(lr=0.05, momentum=0.9, weight_decay=0.1, maximize=True),
                     [([0, 1, 2, 3], {})]),
    "sgd_momentum_groups": ("SGD", dict(lr=0.05, momentum=0.9, weight_decay=1e-2),
                            [([0, 1], dict(dampening=0.3)),
                             ([2, 3], dict(nesterov=True, lr=0.02, momentum=0.5))]),
    "sgd_nesterov": ("SGD", dict(lr=0.1, momentum=0.9, nesterov=True, weight_decay=0.1),
                     [([0, 1, 2, 3], {})]),
    "rmsprop_groups": ("RMSprop", dict(lr=1e-2, weight_decay=0.1),
                       [([0, 2], {}), ([1, 3], dict(alpha=0.9, eps=1e-6, weight_decay=0.0,
                                                   lr=3e-3))]),
    "rmsprop_momentum_centered": ("RMSprop", dict(lr=5e-3, momentum=0.9, centered=True),
                                  [([0, 1], {}), ([2, 3], dict(centered=False, maximize=True,
                                                               weight_decay=0.05))]),
    "adagrad_groups": ("Adagrad", dict(lr=5e-2, lr_decay=0.01, weight_decay=0.1),
                       [([0, 2], {}), ([1, 3], dict(initial_accumulator_value=0.5, eps=1e-6,
                                                   lr_decay=0.0))]),
    "adagrad_maximize": ("Adagrad", dict(lr=0.1, maximize=True, initial_accumulator_value=0.1),
                         [([0, 1, 2, 3], {})]),
}


def run_pair(case, steps, seed=0):
    cls, kwargs, group_options = CASES[case]
    tp, ap = make_params(seed)
    topt = getattr(torch.optim, cls)(groups_of(tp, group_options), **kwargs)
    aopt = getattr(attn.optim, cls)(groups_of(ap, group_options), **kwargs)
    return tp, ap, topt, aopt


@pytest.mark.parametrize("case", sorted(CASES))
def test_step_for_step_with_groups(case):
    tp, ap, topt, aopt = run_pair(case, 8)
    for step in range(8):
        if step == 4:  # nanoGPT's idiom: writes to param_groups take effect at the next step
            for opt in (topt, aopt):
                for g in opt.param_groups:
                    g["lr"] = g["lr"] * 0.5
                opt.param_groups[-1]["weight_decay"] = 0.05
        grads_for(step, tp, ap, skip={(2, 1), (5, 3)})
        topt.step()
        aopt.step()
        for a, t in zip(ap, tp):
            close(a, t, 1e-5, 1e-6)
            if CASES[case][0] in BIT_EXACT and platform.machine() == "x86_64":
                # torch's op-by-op floats, its compiler's FMAs included (optim_adaptive.cpp)
                assert np.array_equal(a.detach().numpy(), t.detach().numpy()), (case, step)
    close_state(aopt.state_dict(), topt.state_dict())


# The optimizers whose float32 steps are torch 1.13's to the bit on x86-64 (AVX2 or AVX-512).
BIT_EXACT = ("RMSprop", "Adagrad", "Adam", "AdamW", "SGD")


def close_state(sa, st):
    assert sorted(sa["state"]) == sorted(st["state"])
    for i in st["state"]:
        assert list(sa["state"][i]) == list(st["state"][i]), i
        for k, v in st["state"][i].items():
            if v is None:
                assert sa["state"][i][k] is None
            elif isinstance(v, int):  # RMSprop's step in torch 1.13
                assert type(sa["state"][i][k]) is int and sa["state"][i][k] == v
            else:
                assert sa["state"][i][k].dtype == attn.float32
                close(sa["state"][i][k], v, 1e-5, 1e-7)
    assert sa["param_groups"] == st["param_groups"]


def test_zero_grad_set_to_none_false_still_steps():
    # torch 1.13's default zero_grad() leaves zero gradients, with which Adam still moves the
    # parameters (weight decay, momentum): the same in attn.
    tp, ap, topt, aopt = run_pair("adam_l2_groups", 0)
    for step in range(4):
        grads_for(step, tp, ap)
        if step >= 2:
            topt.zero_grad()
            aopt.zero_grad()
            assert all(p.grad is not None for p in ap)
        topt.step()
        aopt.step()
    for a, t in zip(ap, tp):
        close(a, t)
    aopt.zero_grad(set_to_none=True)
    assert all(p.grad is None for p in ap)


@pytest.mark.parametrize("case", ["adamw_groups", "adam_amsgrad", "sgd_plain",
                                  "sgd_momentum_groups", "rmsprop_momentum_centered",
                                  "adagrad_groups"])
def test_state_dict_structure_is_torchs(case):
    tp, ap, topt, aopt = run_pair(case, 0)
    for step in range(3):
        grads_for(step, tp, ap, skip={(0, 1), (1, 1), (2, 1)})  # parameter 1 never steps
        topt.step()
        aopt.step()
    st, sa = topt.state_dict(), aopt.state_dict()
    assert set(sa) == {"state", "param_groups"}
    close_state(sa, st)
    for i, s in st["state"].items():
        if "step" in s and torch.is_tensor(s["step"]):
            assert sa["state"][i]["step"].shape == s["step"].shape == torch.Size([])
            assert float(sa["state"][i]["step"]) == float(s["step"])
    assert aopt.defaults == topt.defaults


def convert_state(sd, to):
    """A state_dict with every tensor converted (torch -> attn or attn -> torch)."""
    conv = A if to == "attn" else T
    state = {i: {k: (v if v is None or isinstance(v, int) else conv(v)) for k, v in s.items()}
             for i, s in sd["state"].items()}
    return {"state": state, "param_groups": [dict(g) for g in sd["param_groups"]]}


@pytest.mark.parametrize("case", ["adamw_groups", "adam_amsgrad", "sgd_momentum_groups",
                                  "rmsprop_momentum_centered", "adagrad_groups"])
def test_state_loads_across_both_ways(case):
    # Three steps in one library, the state carried to the other (with the parameters), three
    # more steps in both: the same parameters as six steps in torch.
    tp, ap, topt, aopt = run_pair(case, 0)
    for step in range(3):
        grads_for(step, tp, ap)
        topt.step()
    # torch -> attn
    for a, t in zip(ap, tp):
        with attn.no_grad():
            a.copy_(A(t))
    aopt.load_state_dict(convert_state(topt.state_dict(), "attn"))
    # and attn -> torch, into a fresh torch optimizer over copies of the parameters
    cls, kwargs, group_options = CASES[case]
    tq = [t.detach().clone().requires_grad_(True) for t in tp]
    topt2 = getattr(torch.optim, cls)(groups_of(tq, group_options), **kwargs)
    topt2.load_state_dict(convert_state(aopt.state_dict(), "torch"))
    for step in range(3, 6):
        grads_for(step, tp, ap)
        for q, t in zip(tq, tp):
            q.grad = t.grad.clone()
        topt.step()
        aopt.step()
        topt2.step()
    for a, t, q in zip(ap, tp, tq):
        close(a, t, 1e-5, 1e-6)
        close(A(q), t, 1e-6, 1e-7)


def test_load_state_dict_takes_the_saved_hyper_parameters_and_checks_sizes():
    tp, ap, topt, aopt = run_pair("adamw_groups", 0)
    grads_for(0, tp, ap)
    aopt.step()
    sd = aopt.state_dict()
    sd["param_groups"][0]["lr"] = 0.5
    _, ap2 = make_params(1)
    opt2 = attn.optim.AdamW(groups_of(ap2, CASES["adamw_groups"][2]), lr=1e-2)
    opt2.load_state_dict(sd)
    assert opt2.param_groups[0]["lr"] == 0.5 and opt2.param_groups[0]["params"][0] is ap2[0]
    topt2 = torch.optim.AdamW([torch.zeros(1, requires_grad=True)])
    for opt, mod in ((attn.optim.AdamW([ap2[0]]), attn), (topt2, torch)):
        with pytest.raises(ValueError, match="different number of parameter groups"):
            opt.load_state_dict(sd if mod is attn else topt.state_dict())
    sd1 = {"state": {}, "param_groups": [dict(sd["param_groups"][0], params=[0, 1, 2])]}
    with pytest.raises(ValueError, match="doesn't match the size of optimizer's group"):
        attn.optim.AdamW([ap2[0], ap2[1]]).load_state_dict(sd1)
    bad = convert_state(sd, "attn") if False else sd
    bad["state"][0]["exp_avg"] = attn.zeros(2)
    with pytest.raises(ValueError, match=r"does not match parameter 0"):
        opt2.load_state_dict(bad)


@pytest.mark.parametrize("make", [
    lambda m, p: m.optim.Adam(p, lr=-1.0),
    lambda m, p: m.optim.AdamW(p, eps=-1e-8),
    lambda m, p: m.optim.Adam(p, betas=(1.0, 0.999)),
    lambda m, p: m.optim.AdamW(p, betas=(0.9, -0.1)),
    lambda m, p: m.optim.AdamW(p, weight_decay=-0.1),
    lambda m, p: m.optim.SGD(p, lr=-0.1),
    lambda m, p: m.optim.SGD(p, lr=0.1, momentum=-0.5),
    lambda m, p: m.optim.SGD(p, lr=0.1, weight_decay=-1),
    lambda m, p: m.optim.SGD(p, lr=0.1, nesterov=True),
    lambda m, p: m.optim.SGD(p, lr=0.1, momentum=0.9, dampening=0.1, nesterov=True),
    lambda m, p: m.optim.SGD(p),
    lambda m, p: m.optim.Adam([]),
    lambda m, p: m.optim.AdamW([{"params": p}, {"params": [p[0]]}]),
    lambda m, p: m.optim.Adam(p[0]),
    lambda m, p: m.optim.SGD([{"params": {p[0]}}], lr=0.1),
    lambda m, p: m.optim.Adam([p[0], 3.0]),
    lambda m, p: m.optim.Adam([p[0] * 2]),
    lambda m, p: m.optim.RMSprop(p, lr=-1.0),
    lambda m, p: m.optim.RMSprop(p, alpha=-0.5),
    lambda m, p: m.optim.RMSprop(p, momentum=-0.5),
    lambda m, p: m.optim.RMSprop(p, eps=-1.0),
    lambda m, p: m.optim.Adagrad(p, lr_decay=-0.1),
    lambda m, p: m.optim.Adagrad(p, initial_accumulator_value=-1.0),
    lambda m, p: m.optim.Adagrad(p, eps=-1e-10),
])
def test_errors_as_torch(make):
    tp = [torch.zeros(2, requires_grad=True), torch.zeros(3, requires_grad=True)]
    ap = [attn.zeros(2).requires_grad_(True), attn.zeros(3).requires_grad_(True)]
    with pytest.raises(Exception) as te:
        make(torch, tp)
    with pytest.raises(type(te.value)) as ae:
        make(attn, ap)
    # torch's words (attn's message may say more)
    assert str(te.value).split(":")[0].split(", but got")[0] in str(ae.value)


def test_unsupported_flags_are_not_implemented():
    p = [attn.zeros(2).requires_grad_(True)]
    with pytest.raises(NotImplementedError, match="capturable=True"):
        attn.optim.Adam(p, capturable=True)
    with pytest.raises(NotImplementedError, match="Rprop"):
        attn.optim.Rprop(p)
    with pytest.raises(NotImplementedError, match="differentiable=True"):
        attn.optim.RMSprop(p, differentiable=True)
    with pytest.raises(NotImplementedError, match="NAdam"):
        attn.optim.NAdam
    opt = attn.optim.SGD(p, lr=0.1)
    opt.param_groups[0]["differentiable"] = True
    with pytest.raises(NotImplementedError, match="differentiable=True"):
        opt.step()
    opt.param_groups[0]["differentiable"] = False
    opt.param_groups[0]["lr"] = -1.0  # checked when it reaches the optimizer
    with pytest.raises(ValueError, match="Invalid learning rate: -1"):
        opt.step()


def test_state_of_an_older_torch_without_the_new_flags_loads():
    tp, ap, topt, aopt = run_pair("adamw_groups", 0)
    grads_for(0, tp, ap)
    topt.step()
    sd = convert_state(topt.state_dict(), "attn")
    for g in sd["param_groups"]:  # as torch 1.11 wrote them
        for k in ("foreach", "maximize", "capturable"):
            del g[k]
        g["amsgrad"] = False
    for s in sd["state"].values():
        s["step"] = 1  # a number before torch 1.12
    aopt.load_state_dict(sd)
    assert aopt.param_groups[0]["maximize"] is False
    assert float(aopt.state_dict()["state"][0]["step"]) == 1.0

    class Custom(attn.optim.Optimizer):
        def __init__(self, params):
            super().__init__(params, dict(lr=0.1))
    with pytest.raises(NotImplementedError, match="written in Python"):
        Custom(ap)


def test_add_param_group_and_closure():
    tp, ap = make_params(3)
    topt = torch.optim.SGD(tp[:2], lr=0.1, momentum=0.9)
    aopt = attn.optim.SGD(ap[:2], lr=0.1, momentum=0.9)
    for step in range(5):
        if step == 2:
            topt.add_param_group({"params": tp[2:], "lr": 0.01, "nesterov": True})
            aopt.add_param_group({"params": ap[2:], "lr": 0.01, "nesterov": True})
            assert aopt.param_groups[1] == dict(topt.param_groups[1], params=ap[2:])
        grads_for(step, tp, ap)
        assert aopt.step(lambda: 7.0) == topt.step(lambda: 7.0) == 7.0
    for a, t in zip(ap, tp):
        close(a, t)
    with pytest.raises(ValueError, match="more than one parameter group"):
        aopt.add_param_group({"params": [ap[0]]})


@pytest.mark.parametrize("name", ["RMSprop", "Adagrad"])
def test_rmsprop_and_adagrad_under_schedulers_as_programs_use_them(name):
    # A scheduler over the new optimizers (StepLR, then OneCycleLR, which cycles RMSprop's
    # momentum), lrs written by hand between, and add_param_group: torch's parameters and lrs.
    tp, ap = make_params(5)
    kw = dict(lr=0.05, momentum=0.5) if name == "RMSprop" else dict(lr=0.05, lr_decay=0.1)
    topt = getattr(torch.optim, name)(tp[:3], **kw)
    aopt = getattr(attn.optim, name)(ap[:3], **kw)
    ts = torch.optim.lr_scheduler.StepLR(topt, step_size=2, gamma=0.5)
    as_ = attn.optim.lr_scheduler.StepLR(aopt, step_size=2, gamma=0.5)
    for step in range(6):
        grads_for(step, tp, ap)
        topt.step()
        aopt.step()
        ts.step()
        as_.step()
        assert as_.get_last_lr() == ts.get_last_lr()
    for a, t in zip(ap, tp):
        close(a, t)
    if name == "RMSprop":
        topt = torch.optim.RMSprop(tp, lr=0.01, momentum=0.9)
        aopt = attn.optim.RMSprop(ap, lr=0.01, momentum=0.9)
        ts = torch.optim.lr_scheduler.OneCycleLR(topt, max_lr=0.1, total_steps=8)
        as_ = attn.optim.lr_scheduler.OneCycleLR(aopt, max_lr=0.1, total_steps=8)
        for step in range(6):
            grads_for(step, tp, ap)
            topt.step()
            aopt.step()
            ts.step()
            as_.step()
            assert aopt.param_groups[0]["lr"] == pytest.approx(topt.param_groups[0]["lr"])
            assert aopt.param_groups[0]["momentum"] == pytest.approx(
                topt.param_groups[0]["momentum"])
        for a, t in zip(ap, tp):
            close(a, t)


def test_adagrad_state_from_the_start_and_a_group_added_later():
    tp, ap = make_params(6)
    topt = torch.optim.Adagrad(tp[:2], lr=0.1, initial_accumulator_value=0.25)
    aopt = attn.optim.Adagrad(ap[:2], lr=0.1, initial_accumulator_value=0.25)
    close_state(aopt.state_dict(), topt.state_dict())  # step 0 and the sums before any step
    aopt.add_param_group({"params": ap[2:], "lr": 0.2})
    grads_for(0, tp, ap)
    aopt.step()
    sd = aopt.state_dict()
    assert float(sd["state"][3]["step"]) == 1.0
    # torch 1.13 has no state for it (a KeyError); attn starts it as the others: step 0, the
    # constructor's initial_accumulator_value.
    ref = tp[3].detach() - 0.2 * tp[3].grad / ((0.25 + tp[3].grad.square()).sqrt() + 1e-10)
    close(ap[3], ref)


# ---- schedulers ---------------------------------------------------------------------------------

SCHEDULERS = {
    "lambda": ("LambdaLR", dict(lr_lambda=lambda e: 0.95 ** e)),
    "lambda_per_group": ("LambdaLR", dict(lr_lambda=[lambda e: 1.0 / (e + 1),
                                                     lambda e: min(1.0, (e + 1) / 5)])),
    "step": ("StepLR", dict(step_size=3, gamma=0.5)),
    "multistep": ("MultiStepLR", dict(milestones=[2, 5, 5, 9], gamma=0.3)),
    "exponential": ("ExponentialLR", dict(gamma=0.9)),
    "constant": ("ConstantLR", dict(factor=0.3, total_iters=4)),
    "cosine": ("CosineAnnealingLR", dict(T_max=7, eta_min=1e-4)),
    "cosine_zero_min": ("CosineAnnealingLR", dict(T_max=10)),
    "linear": ("LinearLR", dict(start_factor=0.25, end_factor=1.0, total_iters=6)),
    "onecycle": ("OneCycleLR", dict(max_lr=[0.1, 0.05], total_steps=40)),
    "onecycle_three_phase_linear": ("OneCycleLR", dict(max_lr=0.1, epochs=4, steps_per_epoch=9,
                                                       three_phase=True, pct_start=0.2,
                                                       anneal_strategy="linear")),
}


def comparable(sd):
    """A scheduler's state_dict without OneCycleLR's anneal_func (torch keeps a bound method)."""
    sd = dict(sd)
    f = sd.pop("anneal_func", None)
    if f is not None:
        sd["anneal"] = "linear" if "linear" in (f if isinstance(f, str) else f.__name__) else "cos"
    return sd


def make_sched(mod, name, params):
    cls, kwargs = SCHEDULERS[name]
    opt = mod.optim.AdamW([{"params": params[:2]}, {"params": params[2:], "lr": 3e-3}], lr=1e-2)
    return opt, getattr(mod.optim.lr_scheduler, cls)(opt, **kwargs)


@pytest.mark.parametrize("name", sorted(SCHEDULERS))
def test_scheduler_lrs_are_torchs(name):
    tp, ap = make_params()
    topt, ts = make_sched(torch, name, tp)
    aopt, as_ = make_sched(attn, name, ap)
    for epoch in range(30):  # past T_max: the cosine goes back up, torch's periodic branch
        assert as_.get_last_lr() == ts.get_last_lr(), epoch
        assert [g["lr"] for g in aopt.param_groups] == [g["lr"] for g in topt.param_groups]
        # OneCycleLR cycles beta1 too; every group key is torch's
        assert [{k: v for k, v in g.items() if k != "params"} for g in aopt.param_groups] == [
            {k: v for k, v in g.items() if k != "params"} for g in topt.param_groups]
        assert as_.last_epoch == ts.last_epoch
        topt.step()
        aopt.step()
        ts.step()
        as_.step()
    sa, st = as_.state_dict(), ts.state_dict()
    assert comparable(sa) == comparable(st)
    assert [g["initial_lr"] for g in aopt.param_groups] == [g["initial_lr"]
                                                              for g in topt.param_groups]


@pytest.mark.parametrize("name", ["cosine", "step", "linear", "lambda", "onecycle"])
def test_scheduler_resumes_from_state_dict(name):
    tp, ap = make_params()
    topt, ts = make_sched(torch, name, tp)
    for _ in range(9):
        topt.step()
        ts.step()
    # A fresh attn optimizer and scheduler take torch's states and go on as torch does.
    _, ap2 = make_params(5)
    aopt, as_ = make_sched(attn, name, ap2)
    aopt.load_state_dict(convert_state(topt.state_dict(), "attn"))
    as_.load_state_dict(ts.state_dict())
    for _ in range(12):
        assert as_.get_last_lr() == ts.get_last_lr()
        assert [{k: v for k, v in g.items() if k != "params"} for g in aopt.param_groups] == [
            {k: v for k, v in g.items() if k != "params"} for g in topt.param_groups]
        ts.step()
        as_.step()
    assert comparable(as_.state_dict()) == comparable(ts.state_dict())


def test_scheduler_with_last_epoch_needs_initial_lr_and_follows_lr_writes():
    p = [attn.zeros(2).requires_grad_(True)]
    opt = attn.optim.SGD(p, lr=0.1)
    with pytest.raises(KeyError, match="initial_lr"):
        attn.optim.lr_scheduler.StepLR(opt, 2, last_epoch=3)
    # The recursive forms start from the group's current lr, as torch's do.
    tq = [torch.zeros(2, requires_grad=True)]
    topt = torch.optim.SGD(tq, lr=0.1)
    ts = torch.optim.lr_scheduler.CosineAnnealingLR(topt, 5)
    as_ = attn.optim.lr_scheduler.CosineAnnealingLR(opt, 5)
    for e in range(8):
        if e == 3:
            topt.param_groups[0]["lr"] = 0.07
            opt.param_groups[0]["lr"] = 0.07
        topt.step()  # no gradients: nothing moves
        opt.step()
        ts.step()
        as_.step()
        assert as_.get_last_lr() == ts.get_last_lr()
    with pytest.raises(ValueError, match="Expected 1 lr_lambdas, but got 2"):
        attn.optim.lr_scheduler.LambdaLR(opt, [lambda e: 1.0, lambda e: 1.0])
    with pytest.raises(TypeError, match="is not an Optimizer"):
        attn.optim.lr_scheduler.StepLR(object(), 2)
    with pytest.raises(ValueError, match="Starting multiplicative factor"):
        attn.optim.lr_scheduler.LinearLR(opt, start_factor=1.5)
    oc = attn.optim.lr_scheduler.OneCycleLR(opt, 0.1, total_steps=3)
    tc = torch.optim.lr_scheduler.OneCycleLR(topt, 0.1, total_steps=3)
    topt.step()  # (torch warns about a scheduler stepped before its optimizer)
    for s in (oc, tc):
        s.step()
        s.step()
        s.step()  # one past total_steps
    for s in (oc, tc):
        with pytest.raises(ValueError, match="Tried to step 5 times. The specified number of "
                                             "total steps is 3"):
            s.step()
    for mod, o in ((torch, topt), (attn, opt)):
        with pytest.raises(ValueError, match="Expected float between 0 and 1 pct_start"):
            mod.optim.lr_scheduler.OneCycleLR(o, 0.1, total_steps=3, pct_start=1)
        with pytest.raises(ValueError, match="expected 1 values for max_lr, got 2"):
            mod.optim.lr_scheduler.OneCycleLR(o, [0.1, 0.2], total_steps=3)


# ---- gradient clipping --------------------------------------------------------------------------

@pytest.mark.parametrize("norm_type", [2.0, 1.0, 3.5, 0.5, math.inf, "inf"])
@pytest.mark.parametrize("max_norm", [0.5, 1e3])
def test_clip_grad_norm_matches_torch(norm_type, max_norm):
    tp, ap = make_params(7)
    grads_for(0, tp, ap, skip={(0, 2)})
    nt = torch.nn.utils.clip_grad_norm_(tp, max_norm, norm_type=norm_type)
    na = attn.nn.utils.clip_grad_norm_(ap, max_norm, norm_type=norm_type)
    assert na.dtype == attn.float32 and na.shape == ()
    assert float(na) == pytest.approx(float(nt), rel=1e-6)
    for a, t in zip(ap, tp):
        if t.grad is None:
            assert a.grad is None
        else:
            close(a.grad, t.grad, 1e-6, 1e-7)


def test_clip_grad_norm_nonfinite_and_value():
    tp, ap = make_params(8)
    grads_for(0, tp, ap)
    tp[1].grad[0] = float("inf")
    ap[1].grad = A(tp[1].grad)
    for mod, params in ((torch, tp), (attn, ap)):
        with pytest.raises(RuntimeError, match="is non-finite, so it cannot be clipped"):
            mod.nn.utils.clip_grad_norm_(params, 1.0, error_if_nonfinite=True)
    assert math.isinf(float(attn.nn.utils.clip_grad_norm_(ap, 1.0, norm_type="inf")))
    assert float(attn.nn.utils.clip_grad_norm_([], 1.0)) == float(
        torch.nn.utils.clip_grad_norm_([], 1.0)) == 0.0
    tp, ap = make_params(9)
    grads_for(0, tp, ap)
    torch.nn.utils.clip_grad_value_(tp, 0.3)
    attn.nn.utils.clip_grad_value_(ap, 0.3)
    for a, t in zip(ap, tp):
        close(a.grad, t.grad, 0, 0)
    t = torch.randn(4, requires_grad=True)
    a = A(t).requires_grad_(True)
    t.grad = torch.randn(4)
    a.grad = A(t.grad)
    torch.nn.utils.clip_grad_value_(t, 0.1)  # a single tensor
    attn.nn.utils.clip_grad_value_(a, 0.1)
    close(a.grad, t.grad, 0, 0)


def test_training_loop_as_programs_write_it():
    # A small regression model in the idioms of minGPT / nanoGPT: AdamW with decay / no-decay
    # groups, a warm-up LambdaLR, clip_grad_norm_, zero_grad(set_to_none=True): the same losses.
    def run(mod):
        g = torch.Generator().manual_seed(0)
        w1, b1 = torch.randn(8, 16, generator=g) * 0.3, torch.zeros(16)
        w2, b2 = torch.randn(16, 1, generator=g) * 0.3, torch.zeros(1)
        x, y = torch.randn(32, 8, generator=g), torch.randn(32, 1, generator=g)
        conv = (lambda t: t.clone()) if mod is torch else A
        params = [conv(t).requires_grad_(True) for t in (w1, b1, w2, b2)]
        X, Y = conv(x), conv(y)
        opt = mod.optim.AdamW([{"params": [params[0], params[2]], "weight_decay": 0.1},
                               {"params": [params[1], params[3]], "weight_decay": 0.0}],
                              lr=3e-2, betas=(0.9, 0.95))
        sched = mod.optim.lr_scheduler.LambdaLR(opt, lambda it: min(1.0, (it + 1) / 4))
        losses = []
        for it in range(12):
            h = (X @ params[0] + params[1]).relu()
            loss = ((h @ params[2] + params[3] - Y) ** 2).mean()
            opt.zero_grad(set_to_none=True)
            loss.backward()
            mod.nn.utils.clip_grad_norm_(params, 1.0)
            opt.step()
            sched.step()
            losses.append(loss.item())
        return losses
    np.testing.assert_allclose(run(attn), run(torch), rtol=1e-5)

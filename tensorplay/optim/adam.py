"""Adam and AdamW, as ``torch.optim.Adam``/``AdamW`` with ``capturable=True``.

The step count lives on the device and every bias correction is computed from it with tensor
ops, so a step reads nothing on the host and can be captured. The per-step scalars (bias
corrections, step size) are computed once per group and device over one vector that holds
the step counts of all its parameters (each ``state[p]["step"]`` is a 0-d view into it), instead
of once per parameter: the few ops PyTorch's ``foreach`` path spends on them, without
``foreach`` kernels.
"""

from __future__ import annotations

from typing import Any, Callable

from .._dtype import float32, float64
from .._runtime.dispatch import check_dtype_supported
from .._tensor.autograd import no_grad
from .._tensor.creation import ones, zeros_like
from .._tensor.functional import maximum, pow as _pow, sqrt
from .._tensor.optimizers import adam_update_
from .._tensor.pointwise import addcdiv, addcmul
from .._tensor.tensor import Tensor
from ._flat import FlatBuffers, flattenable
from .optimizer import Optimizer, ParamsT, refuse_state_in_capture
from ._scalars import check_lr, device_lr

__all__ = ["Adam", "AdamW"]


class _Bucket:
    """The parameters of one group on one device, and their step counts.

    ``steps`` is a float32 vector with one slot per parameter; a parameter's
    ``state["step"]`` is ``views[i]`` (a 0-d view of its slot) once it has state. Slots of
    parameters without state hold 1 (any nonzero count: the per-group scalars are computed for
    every slot, and a zero count would divide by zero).
    """

    __slots__ = ("params", "steps", "views", "device", "scalar_dtype", "flat", "uniform",
                 "first_step", "lr_tensors")

    def __init__(self, params: list[Tensor]):
        self.params = params
        self.device = params[0].device
        self.steps = ones(len(params), dtype=float32, device=self.device)
        self.views = [self.steps[i] for i in range(len(params))]
        self.first_step = self.steps[0:1]
        #: the parameters, gradients and moments as views of flat buffers (None where the
        #: parameters cannot share one: mixed dtypes, strided, complex): one fused update
        self.flat = FlatBuffers(params) if flattenable(params) else None
        #: whether every count has been the same since the state was made (known on the host:
        #: all parameters got their state at once and every step updated all of them), so the
        #: fused update may read one count for all
        self.uniform = True
        self.lr_tensors: dict[float, Tensor] = {}
        try:
            check_dtype_supported(self.device, float64)
            self.scalar_dtype = float64
        except TypeError:
            self.scalar_dtype = float32


class Adam(Optimizer):
    r"""Adam, as ``torch.optim.Adam`` (with PyTorch's ``capturable=True`` arithmetic). For
    each parameter with a gradient, at step ``t`` (counted per parameter)::

        g = -grad if maximize else grad
        if weight_decay != 0:  g = g + weight_decay * param     (AdamW: param *= 1 - lr * wd)
        m = beta1 * m + (1 - beta1) * g                             (as m.lerp_(g, 1 - beta1))
        v = beta2 * v + (1 - beta2) * g * g
        if amsgrad:  v_max = max(v_max, v);  v = v_max
        param = param - lr / (1 - beta1**t) * m / (sqrt(v) / sqrt(1 - beta2**t) + eps)

    Args:
        params: tensors or parameter groups (dicts), see :class:`Optimizer`.
        lr: learning rate (default 1e-3): a float, or a one-element tensor on the parameters'
            device; a captured step reads the tensor at every replay, so ``lr.fill_(...)``
            between replays changes the learning rate (a float is frozen into the graph).
        betas: coefficients of the running averages of the gradient and its square
            (default (0.9, 0.999)).
        eps: added to the denominator (default 1e-8).
        weight_decay: L2 penalty added to the gradient (default 0).
        amsgrad: use the maximum of the second moments (AMSGrad; default False).
        maximize: maximize the objective instead of minimizing (default False).
        capturable: accepted for compatibility; always on: every step keeps its count on the
            device and reads nothing on the host, whatever this says.
        foreach, differentiable, fused: accepted for compatibility with PyTorch and kept in
            the groups (``differentiable=True`` is refused).

    State per parameter, made by its first step (which must therefore run eagerly, not
    inside a capture): ``step`` (a float32 0-d tensor on the parameter's device), ``exp_avg``,
    ``exp_avg_sq`` and, with amsgrad, ``max_exp_avg_sq``. The per-step scalars (bias
    corrections, step size) are computed on the device in float64 where the device holds it
    (else float32), whatever the parameters' dtype: as accurate as PyTorch's default path,
    which computes them in Python floats on the host (its capturable path uses float32 and
    loses about 1e-5 of relative accuracy in the first steps).

    Kernels per step: per parameter 6 (+1 with amsgrad, +1 with weight decay, +1 for
    ``maximize``); per group and device 10 more (+1 with a tensor lr, +2 for AdamW's
    decay with a tensor lr); +1 per parameter when only some parameters of a group have
    gradients (their step counts advance one by one).

    Raises:
        ValueError: a negative lr, eps or weight_decay, a beta outside [0, 1), a tensor lr of
            more than one element.
        NotImplementedError: complex parameters.
    """

    _decoupled = False

    def __init__(self, params: ParamsT, lr: float | Tensor = 1e-3,
                 betas: tuple[float, float] = (0.9, 0.999), eps: float = 1e-8,
                 weight_decay: float = 0, amsgrad: bool = False, *,
                 foreach: bool | None = None, maximize: bool = False,
                 capturable: bool = False, differentiable: bool = False,
                 fused: bool | None = None) -> None:
        check_lr(lr)
        if not 0.0 <= eps:
            raise ValueError(f"Invalid epsilon value: {eps}")
        if not 0.0 <= betas[0] < 1.0:
            raise ValueError(f"Invalid beta parameter at index 0: {betas[0]}")
        if not 0.0 <= betas[1] < 1.0:
            raise ValueError(f"Invalid beta parameter at index 1: {betas[1]}")
        if not 0.0 <= weight_decay:
            raise ValueError(f"Invalid weight_decay value: {weight_decay}")
        if differentiable:
            raise ValueError("differentiable=True is not supported: tensorplay optimizers "
                             "update parameters in place, outside autograd")
        defaults = dict(lr=lr, betas=betas, eps=eps, weight_decay=weight_decay,
                        amsgrad=amsgrad, maximize=maximize, foreach=foreach,
                        capturable=capturable, differentiable=differentiable, fused=fused)
        self._buckets: dict[int, tuple[dict, list[Tensor], dict[int, tuple[_Bucket, int]]]] = {}
        super().__init__(params, defaults)

    def _state_loaded(self) -> None:
        """Link the loaded step counts to the groups' count vectors now (copies, made while
        loading), so that even the first step after loading may be captured."""
        self._buckets = {}
        with no_grad():
            for group in self.param_groups:
                where = self._locate(group, check=False)
                for p in group["params"]:
                    state = self.state.get(p)
                    if state and "exp_avg" in state:
                        bucket, i = where[id(p)]
                        self._adopt(p, state, bucket, i, group["amsgrad"])

    def _zero_flat_grads(self) -> set[int]:
        zeroed: set[int] = set()
        for _, _, where in self._buckets.values():
            for bucket, _ in where.values():
                flat = bucket.flat
                if flat is not None and id(flat.params[0]) not in zeroed and \
                        flat.grads_at_home():
                    flat.grad.zero_()
                    zeroed.update(id(p) for p in flat.params)
        return zeroed

    def step(self, closure: Callable[[], Any] | None = None) -> Any:
        """One Adam step over every parameter whose ``.grad`` is not None (see the class
        docstring). Reads nothing on the host; capturable once every parameter that has a
        gradient has state (after one eager step, or after ``load_state_dict``)."""
        loss = self._closure_loss(closure)
        with no_grad():
            for group in self.param_groups:
                self._step_group(group)
        return loss

    # -- the step counts --------------------------------------------------------------------
    def _locate(self, group: dict, check: bool = True) -> dict[int, tuple[_Bucket, int]]:
        """id(param) -> (bucket, slot) for ``group``, rebuilt when its params changed."""
        params = group["params"]
        found = self._buckets.get(id(group))
        if found is not None and found[0] is group and len(found[1]) == len(params) and all(
                a is b for a, b in zip(found[1], params)):
            return found[2]
        for p in params:
            if check and p.grad is not None:
                refuse_state_in_capture(self, p.device, "the step counts of a group")
        by_device: dict[Any, list[Tensor]] = {}
        for p in params:
            by_device.setdefault(p.device, []).append(p)
        where: dict[int, tuple[_Bucket, int]] = {}
        for members in by_device.values():
            bucket = _Bucket(members)
            for i, p in enumerate(members):
                where[id(p)] = (bucket, i)
        self._buckets[id(group)] = (group, list(params), where)
        return where

    def _adopt(self, p: Tensor, state: dict, bucket: _Bucket, i: int, amsgrad: bool) -> None:
        """Give ``p`` its state (first step) or link loaded state to its slot."""
        refuse_state_in_capture(self, p.device, "the state of a parameter")
        view = bucket.views[i]
        flat = bucket.flat
        if "exp_avg" not in state:
            view.zero_()
            state["step"] = view
            if flat is not None:
                state["exp_avg"] = flat.state_views("exp_avg")[i]
                state["exp_avg_sq"] = flat.state_views("exp_avg_sq")[i]
            else:
                state["exp_avg"] = zeros_like(p)
                state["exp_avg_sq"] = zeros_like(p)
        else:
            if flat is not None:   # loaded state: into the flat buffers
                for name in ("exp_avg", "exp_avg_sq", "max_exp_avg_sq"):
                    if name in state:
                        home = flat.state_views(name)[i]
                        home.copy_(state[name])
                        state[name] = home
            old = state.get("step", 0)
            if isinstance(old, Tensor):
                if old is not view:
                    view.copy_(old.reshape(()))
            else:
                view.fill_(float(old))
            state["step"] = view
        if amsgrad and "max_exp_avg_sq" not in state:
            state["max_exp_avg_sq"] = flat.state_views("max_exp_avg_sq")[i] if flat is not None \
                else zeros_like(p)

    # -- the update -------------------------------------------------------------------------
    def _step_group(self, group: dict[str, Any]) -> None:
        work = [p for p in group["params"] if p.grad is not None]
        if not work:
            return
        for p in work:
            if p.is_complex():
                raise NotImplementedError(f"{type(self).__name__} does not support complex "
                                          f"parameters yet")
        where = self._locate(group)
        amsgrad = group["amsgrad"]
        buckets: dict[int, tuple[_Bucket, list[tuple[Tensor, int]]]] = {}
        adopted: dict[int, int] = {}
        for p in work:
            bucket, i = where[id(p)]
            state = self.state[p]
            if state.get("step") is not bucket.views[i] or (
                    amsgrad and "max_exp_avg_sq" not in state):
                if "exp_avg" not in state:
                    adopted[id(bucket)] = adopted.get(id(bucket), 0) + 1
                self._adopt(p, state, bucket, i, amsgrad)
            buckets.setdefault(id(bucket), (bucket, []))[1].append((p, i))
        for bucket, members in buckets.values():
            fresh = adopted.get(id(bucket), 0)
            if len(members) != len(bucket.params) or fresh not in (0, len(bucket.params)):
                bucket.uniform = False   # the counts of the bucket may differ from now on
            if bucket.flat is not None and bucket.uniform and bucket.flat.grads_at_home():
                self._step_flat(group, bucket)
            else:
                self._step_bucket(group, bucket, members)

    def _step_flat(self, group: dict[str, Any], bucket: _Bucket) -> None:
        """Every parameter of ``bucket`` at once: the counts advance (one launch), then one
        fused update over the flat buffers (:func:`adam_update_`)."""
        lr, (beta1, beta2) = group["lr"], group["betas"]
        if isinstance(lr, Tensor):
            lr = device_lr(lr, bucket.device)
        else:
            found = bucket.lr_tensors.get(lr)
            if found is None:
                refuse_state_in_capture(self, bucket.device, "the learning rate tensor")
                found = bucket.lr_tensors[lr] = ones(1, dtype=bucket.scalar_dtype,
                                                     device=bucket.device) * lr
            lr = found
        bucket.steps.add_(1)
        flat: FlatBuffers = bucket.flat  # type: ignore[assignment]   # a bucket with flat buffers
        amsgrad = group["amsgrad"]
        adam_update_(flat.param, flat.grad, flat.state_buffer("exp_avg"),
                     flat.state_buffer("exp_avg_sq"),
                     flat.state_buffer("max_exp_avg_sq") if amsgrad else None,
                     bucket.first_step, lr, beta1=beta1, beta2=beta2, eps=group["eps"],
                     weight_decay=group["weight_decay"], decoupled=self._decoupled,
                     maximize=group["maximize"])

    def _step_bucket(self, group: dict[str, Any], bucket: _Bucket,
                     members: list[tuple[Tensor, int]]) -> None:
        lr, (beta1, beta2), eps = group["lr"], group["betas"], group["eps"]
        weight_decay, amsgrad, maximize = group["weight_decay"], group["amsgrad"], \
            group["maximize"]
        if isinstance(lr, Tensor):
            lr = device_lr(lr, bucket.device)
        if len(members) == len(bucket.params):
            bucket.steps.add_(1)
        else:
            for _, i in members:
                bucket.views[i].add_(1)
        # the scalars of PyTorch's capturable Adam, for every slot at once:
        #   step_size_neg = -lr / (1 - beta1**t), bias_correction2_sqrt = sqrt(1 - beta2**t),
        #   denom = sqrt(v) / (bias_correction2_sqrt * step_size_neg) + eps / step_size_neg,
        #   param += m / denom
        t = bucket.steps.to(bucket.scalar_dtype)
        bias_correction1 = 1 - _pow(beta1, t)
        bias_correction2_sqrt = (1 - _pow(beta2, t)).sqrt_()
        if isinstance(lr, Tensor):
            step_size_neg = (lr / bias_correction1).neg_()
        else:
            step_size_neg = -lr / bias_correction1
        scale = bias_correction2_sqrt.mul_(step_size_neg)
        shift = eps / step_size_neg
        decay = None
        if weight_decay != 0 and self._decoupled:
            decay = 1 - lr * weight_decay if not isinstance(lr, Tensor) else \
                (lr * -weight_decay).add_(1)
        for p, i in members:
            state = self.state[p]
            exp_avg, exp_avg_sq = state["exp_avg"], state["exp_avg_sq"]
            g: Tensor = p.grad  # type: ignore[assignment]   # members have gradients
            if maximize:
                g = -g
            if weight_decay != 0:
                if decay is not None:
                    p.mul_(decay)
                else:
                    g = addcmul(g, p, self._one(p), value=weight_decay)
            exp_avg.lerp_(g, 1 - beta1)
            exp_avg_sq.mul_(beta2).addcmul_(g, g, value=1 - beta2)
            if amsgrad:
                v = maximum(state["max_exp_avg_sq"], exp_avg_sq, out=state["max_exp_avg_sq"])
            else:
                v = exp_avg_sq
            denom = sqrt(v)
            addcdiv(shift[i], denom, scale[i], out=denom)
            p.addcdiv_(exp_avg, denom)


class AdamW(Adam):
    r"""AdamW, as ``torch.optim.AdamW``: Adam with decoupled weight decay. At each step the
    parameter first decays, ``param *= 1 - lr * weight_decay`` (right after the step count
    advances, before the moments are updated, in PyTorch's order), and the gradient is not
    changed by the decay; everything else is :class:`Adam` (see there for arguments, state,
    capture and kernel counts). The default weight_decay is 1e-2.
    """

    _decoupled = True

    def __init__(self, params: ParamsT, lr: float | Tensor = 1e-3,
                 betas: tuple[float, float] = (0.9, 0.999), eps: float = 1e-8,
                 weight_decay: float = 1e-2, amsgrad: bool = False, *,
                 maximize: bool = False, foreach: bool | None = None,
                 capturable: bool = False, differentiable: bool = False,
                 fused: bool | None = None) -> None:
        super().__init__(params, lr, betas, eps, weight_decay, amsgrad, foreach=foreach,
                         maximize=maximize, capturable=capturable,
                         differentiable=differentiable, fused=fused)

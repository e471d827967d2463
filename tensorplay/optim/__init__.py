"""``tensorplay.optim``: optimizers with PyTorch's names, signatures, defaults, algorithms,
``state_dict`` format and errors: :class:`SGD`, :class:`Adam`, :class:`AdamW` and their base
:class:`Optimizer`.

A training step::

    opt = tp.optim.AdamW(params, lr=1e-3)
    for x, y in data:
        opt.zero_grad()             # gradients accumulate: zero them before each backward
        loss_fn(model(x), y).backward()
        opt.step()

Optimizers take any iterable of leaf tensors (``requires_grad=True``), or of dicts that form
parameter groups with their own options (``[{"params": a}, {"params": b, "lr": 0.1}]``). A
parameter whose ``.grad`` is None at a step is skipped (its state does not advance).

**Every step is capturable.** PyTorch's Adam needs ``capturable=True`` to keep its step count
on the device; here that is the only code path, on every device: the count is a float32 tensor
on the parameter's device (``state[p]["step"]``), bias corrections are tensor ops on it, and a
step reads no value on the host (no ``.item()``, no Python ``if`` on a tensor), so eager and
captured steps compute the same numbers. ``capturable=`` is accepted and changes nothing. To
capture a training step::

    lr = tp.tensor(1e-3, device="cuda")        # a tensor lr: see below
    opt = tp.optim.Adam(params, lr=lr)
    step()                                     # one eager step (warm-up): creates the state
    g = tp.accelerator.Graph()
    with g:
        opt.zero_grad(set_to_none=False)       # zero in place: keep the same .grad tensors
        loss_fn(model(x), y).backward()
        opt.step()
    for ...:
        g.replay()                             # one training step
        lr.fill_(new_lr)                       # takes effect at the next replay

Pitfalls of a captured step:

- State is made by a parameter's first step (Adam's moments and count, SGD's momentum
  buffer). Made inside a capture, it would be reset by every replay, so a step that would
  create state inside a capture raises ``RuntimeError``: step once eagerly first (or load a
  ``state_dict``).
- Python-number options (``lr=1e-3``, betas, eps, weight decay) are frozen into the graph at
  capture. A learning rate that changes between replays must be a one-element tensor on the
  parameters' device, changed in place (``lr.fill_(x)``, ``lr.copy_(t)``); assigning a new
  object to ``group["lr"]`` is not seen by the graph.
- ``zero_grad()`` (``set_to_none=True``) drops the gradient tensors that the graph reads; use
  ``zero_grad(set_to_none=False)`` inside and around captured steps.
- Which parameters have a gradient is decided on the host, at capture.

Kernels: the update uses tensor ops only, in place where possible, with scalars shared by all
parameters of a group. Where a group's parameters can share flat buffers (one floating dtype,
one device, each contiguous: ``optim/_flat.py``), the parameters, their gradients and their
state become views of a few flat tensors (autograd writes each new ``.grad`` into its view), so
an update is one launch over all of them; otherwise it runs per parameter. Pitfall: a graph
captured before the optimizer was made reads the parameters' old memory: make optimizers
before capturing.
"""

from __future__ import annotations

from .adam import Adam, AdamW
from .optimizer import Optimizer
from .sgd import SGD

__all__ = ["Adam", "AdamW", "Optimizer", "SGD"]

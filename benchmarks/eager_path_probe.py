"""Where an eager op's host time goes beyond its launch and its result's allocation (cuda
only): ``a.softmax(-1)`` and ``a + b`` on (64, 64) float32, timed whole, through the op
layer's ``_execute``, and as lean stand-ins that make the same allocation, Tensor and launch
with nothing else around them. Also each stand-in with one piece left out, so the pieces'
costs show as differences measured in one process. Best of seven loops of 300 calls, host
us per call. Usage: ``python3 benchmarks/eager_path_probe.py``."""

import cProfile
import pstats

import cupy

import tensorplay as tp
from tensorplay._runtime import dispatch as D
from tensorplay._tensor import activations as A
from tensorplay._tensor import elementwise as E
from tensorplay._tensor.tensor import Tensor
from tensorplay.bench.timing import timed_loops


def row(name: str, fn) -> None:
    fn()
    host, _ = timed_loops(fn, cupy.cuda.Device().synchronize, 300, 7, 50)
    print(f"  {name:56s} {min(host):8.2f}", flush=True)


def main() -> None:
    dev = tp.device("cuda:0")
    a, b = tp.randn(64, 64, device=dev), tp.randn(64, 64, device=dev)
    a.softmax(-1), a + b
    soft = A._softmax_plans[("softmax", a._layout, -1)]
    add = next(p for p in E._plans.values() if p.op == "add" and p.fast is not None)
    backend = D._selection.accelerator
    stream = D.current_native_stream(dev)
    cupy_stream = stream.cupy
    current = cupy.cuda.get_current_stream
    f32 = tp.float32
    x, y = a._data, b._data
    out = cupy.empty((64, 64), cupy.float32)

    def lean(plan, *arrays):
        array = D.empty(dev, plan.shape, f32)
        result = Tensor._make(array, dev, f32)
        result._layout = plan.out_layout
        if current() is not cupy_stream:
            backend.launch(stream, lambda: None)
        plan.fast(*arrays, array)
        return result

    def lean_no_make(plan, *arrays):
        array = D.empty(dev, plan.shape, f32)
        plan.fast(*arrays, array)
        return array

    print("host us per call")
    for label, plan, arrays, whole in (("softmax", soft, (x,), lambda: a.softmax(-1)),
                                       ("add", add, (x, y), lambda: a + b)):
        operands = (a,) if label == "softmax" else (a, b)
        fast = plan.fast
        print(label)
        row("the op", whole)
        row("_execute(plan, operands, None)", lambda: E._execute(plan, operands, None))
        row("lean: empty, Tensor, bind check, launcher", lambda: lean(plan, *arrays))
        row("lean without the Tensor", lambda: lean_no_make(plan, *arrays))
        row("the launcher into a kept array", lambda: fast(*arrays, out))
        row("dispatch.empty + free", lambda: D.empty(dev, (64, 64), f32))
        row("launch_native(partial(launcher))",
            lambda: D.launch_native(dev, __import__("functools").partial(fast, *arrays, out)))
    profile = cProfile.Profile()
    profile.enable()
    for _ in range(20000):
        a.softmax(-1)
    profile.disable()
    cupy.cuda.Device().synchronize()
    pstats.Stats(profile).sort_stats("tottime").print_stats(16)


if __name__ == "__main__":
    main()

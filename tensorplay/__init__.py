"""tensorplay: a Python tensor library built around a device-agnostic accelerator layer.

Capture work into graphs once and replay it with almost no host cost, branch and loop on the
device (if/while conditional nodes), reason about memory pools, and draw random numbers that stay
correct inside graphs, with one API on a GPU (``cuda``), a simulated accelerator (``sim``) and a
host-only install. See ``tensorplay.accelerator`` and the README.
"""

from ._runtime import allocator as _allocator, select as _selection

_selection._select(_allocator.device_allocator)

from ._dtype import (  # noqa: E402
    bfloat16, bool, complex64, complex128, dtype, float16, float32, float64, get_default_dtype,
    int8, int16, int32, int64, promote_types, result_type, uint8, uint16, uint32, uint64,
)
from ._runtime.device import device  # noqa: E402
from ._errors import OutOfMemoryError  # noqa: E402
from ._version import __version__  # noqa: E402
from ._tensor.tensor import Size, Tensor  # noqa: E402
from ._tensor import methods as _methods  # noqa: E402

_methods.install()

from ._tensor.creation import (  # noqa: E402
    arange, as_tensor, empty, empty_like, eye, from_dlpack, from_numpy, full, full_like,
    linspace, ones, ones_like, tensor, zeros, zeros_like,
)
from ._tensor.functional import *  # noqa: E402,F401,F403
from ._tensor.functional import __all__ as _functional_all  # noqa: E402
from ._tensor.linalg import get_float32_matmul_precision, set_float32_matmul_precision  # noqa: E402,F401
from ._tensor.random import manual_seed, initial_seed, seed, rand, randn, randint, normal  # noqa: E402
from ._tensor.random import (  # noqa: E402
    Generator, bernoulli, multinomial, poisson, rand_like, randint_like, randn_like, randperm,
)
from .accelerator._streams import Event, Stream  # noqa: E402
from . import accelerator  # noqa: E402
from .accelerator.control_flow import cond, fori_loop, switch, while_loop  # noqa: E402
from . import autograd  # noqa: E402,F401
from ._tensor.autograd import (  # noqa: E402
    enable_grad, inference_mode, is_grad_enabled, no_grad, set_grad_enabled,
)
from . import nn  # noqa: E402
from . import optim  # noqa: E402,F401
from . import linalg  # noqa: E402,F401
from .compiler import compile  # noqa: E402
from ._tensor.repr import set_printoptions  # noqa: E402
from .serialization import load, save  # noqa: E402



float = float32
double = float64
half = float16
cfloat = complex64
long = int64
int = int32

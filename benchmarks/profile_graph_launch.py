"""Where the host time of ``Graph.replay`` and ``Graph.stage_and_launch`` goes, piece by piece,
on the current accelerator (run on the GPU machine). Prints the best of 7 loops of 500 calls
(host time, the device queue never fills), then a profile of stage_and_launch with 8 inputs."""

import cProfile
import pstats
import time

import tensorplay as tp
from tensorplay.accelerator._staging import plan_staging


def best_host_us(fn, calls=500, repeats=7):
    for _ in range(50):
        fn()
    tp.accelerator.synchronize()
    best = float("inf")
    for _ in range(repeats):
        start = time.perf_counter()
        for _ in range(calls):
            fn()
        best = min(best, (time.perf_counter() - start) / calls * 1e6)
        tp.accelerator.synchronize()
    return best


dev = f"{tp.accelerator.current_accelerator().type}:0"
stream = tp.accelerator.current_stream()
backend = tp.accelerator.graphs.require_accelerator()
rows = []
for count in (1, 8):
    statics = [tp.zeros(256, device=dev) for _ in range(count)]
    fresh = [tp.rand(256, device=dev) for _ in range(count)]
    graph = tp.accelerator.Graph()
    with graph:
        total = statics[0] + statics[-1]
    copies, _, _, plan = plan_staging(statics, fresh, 0, backend, None)
    native = stream._native
    exe = graph._exec
    rows += [
        ("replay(stream=s)", lambda: graph.replay(stream=stream)),
        ("replay()", graph.replay),
        ("backend.graph_launch", lambda: backend.graph_launch(exe, native)),
        (f"plan_staging ({count})", lambda: plan_staging(statics, fresh, 0, backend, plan)),
        (f"backend.stage_and_launch ({count})",
         lambda: backend.stage_and_launch(exe, native, copies)),
        (f"Graph.stage_and_launch ({count})", lambda: graph.stage_and_launch(statics, fresh)),
    ]
    if dev.startswith("cuda"):
        from tensorplay.bench.peers import raw_graph_launchers
        rows += [(f"raw cudaGraphLaunch ({binding})", launch)
                 for binding, launch in raw_graph_launchers(graph, stream).items()]
        rows.append((f"stage.load ({count})", lambda: exe.stage_in.load(copies)))
    for label, fn in rows:
        print(f"{label:<36} {best_host_us(fn):7.2f} us host per call")
    rows = []
profile = cProfile.Profile()
profile.enable()
for _ in range(2000):
    graph.stage_and_launch(statics, fresh)
tp.accelerator.synchronize()
profile.disable()
pstats.Stats(profile).sort_stats("tottime").print_stats(10)

#!/usr/bin/env bash
# One GPU session in one call: install, info, the conformance suite and backend tests on cuda,
# then the benchmark suite. Everything lands under $OUT (the device tool brings it back).
# Usage: bash benchmarks/gpu_check.sh [all|check|final|tests|bench|quick|probe|eager|matmul] [args]
# check: the elementwise check, the MLP probes and the conformance suite (fits one 10-min call)
# final: the control-flow probe and the benchmark suite
# mlp: where the eager MLP's time goes (profile_mlp.py)
# skinny: the matmul/compile/nn tests on cuda and the MLP device probe
# devprobe: the MLP's device time per piece, the eager-op probe and the MLP profile
# probe: the control-flow and eager probes (where the per-step and per-op host time goes)
# tables: the given tests, the eager table twice (before/after with .baseline/), the layer
#   and small-product probes; TP_VERIFY=1: then verify
# verify: the conformance suite in four processes (tests/torch_differential, the checks against
#   torch, among them)
# launch: the eager probe, the bench's eager table, the MLP device probe and profile on a quiet
#   machine, then verify
# last: the bench and the conformance suite (the torch differential tests among them)
# training: the eager table at the tree before autograd (.baseline/, carried: `git archive
#   c448e62 tensorplay | tar -x -C .baseline`) and at this tree in one call, the bench's
#   training-step and MLP rows, and the Python frames per eager op
# rows: the given tests (TP_TESTS), then the bench's given cases (TP_CASES); TP_EAGER=1: and
#   the eager table
# scripts: the given tests, then each argument (a script and its arguments) into $OUT
# profile: the eager training step's and the eager GPT-2 decode step's cProfile
# autograd: the autograd, nn, optim and training tests and the differential tests against
#   torch.autograd (four processes), then what 'training' runs
set -u
what=${1:-all}; shift || true
OUT=${OUT:-/tmp/tp_out}; mkdir -p "$OUT"
export PYTHONUNBUFFERED=1 TENSORPLAY_ACCELERATOR=cuda XLA_PYTHON_CLIENT_PREALLOCATE=false PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"
# nvmath-python (the matrix engine) is not installed there and nothing can be downloaded: the
# wheel travels with the checkout in .whl/ (kept out of git) and goes into a private target.
# TP_WITHOUT_NVMATH=1 leaves it out (the suite as a cuda install without the matrix engine runs)
if [ -z "${TP_WITHOUT_NVMATH:-}" ] && ls .whl/nvmath_python-*cp312*.whl >/dev/null 2>&1; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
    --target /tmp/tp_site .whl/nvmath_python-*cp312*.whl > "$OUT/pip_nvmath.log" 2>&1 \
    && export PYTHONPATH="$PYTHONPATH:/tmp/tp_site" || echo "nvmath-python install failed"
fi
# given_tests LOG: the tests named in TP_TESTS (if any) into $OUT/LOG, their failures printed.
# Groups separated by '|' run as parallel pytest processes (the card and its 16 cores have room)
given_tests() {
  [ -n "${TP_TESTS:-}" ] || return 0
  local i=0 group
  IFS='|' read -ra groups <<< "$TP_TESTS"
  for group in "${groups[@]}"; do
    timeout ${TP_TESTS_TIMEOUT:-200} python3 -m pytest -q -p no:cacheprovider \
      -o faulthandler_timeout=100 $group > "/tmp/tp_given$i.log" 2>&1 &
    i=$((i+1))
  done
  wait
  for ((j = 0; j < i; j++)); do echo "=== ${groups[$j]}"; cat "/tmp/tp_given$j.log"; done > "$OUT/$1"
  grep -E "^(FAILED|ERROR)|^E   " "$OUT/$1" | cut -c1-220 | head -40
  for ((j = 0; j < i; j++)); do tail -n 1 "/tmp/tp_given$j.log"; done
}
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader | tee "$OUT/info.txt"
python3 -m tensorplay info 2>&1 | tee -a "$OUT/info.txt"
if [ "$what" = skinny ]; then
  timeout 300 python3 -m pytest -q -p no:cacheprovider --timeout=60 tests/internals/test_cuda_matmul.py \
    tests/test_tensor_matmul.py tests/compiler tests/test_nn_functional.py "$@" > "$OUT/skinny_tests.log" 2>&1
  echo "pytest exit $?"; grep -E "^(FAILED|ERROR)" "$OUT/skinny_tests.log" | head -40; tail -3 "$OUT/skinny_tests.log"
  timeout 150 python3 benchmarks/mlp_device_probe.py > "$OUT/mlp_device_probe.txt" 2>&1; cat "$OUT/mlp_device_probe.txt"
fi
if [ "$what" = devprobe ]; then
  timeout 150 python3 benchmarks/mlp_device_probe.py > "$OUT/mlp_device_probe.txt" 2>&1; cat "$OUT/mlp_device_probe.txt"
  timeout 150 python3 benchmarks/eager_probe.py > "$OUT/eager_probe.txt" 2>&1; grep "per call" "$OUT/eager_probe.txt"
  timeout 150 python3 benchmarks/profile_mlp.py > "$OUT/profile_mlp.txt" 2>&1; head -20 "$OUT/profile_mlp.txt"
fi
if [ "$what" = mlp ]; then
  timeout 200 python3 benchmarks/profile_mlp.py 2>&1 | tee "$OUT/profile_mlp.txt" | head -80
fi
if [ "$what" = probe ]; then
  timeout 200 python3 benchmarks/controlflow_probe.py 2>&1 | tee "$OUT/controlflow_probe.txt"
fi
if [ "$what" = probe ] || [ "$what" = eager ]; then
  timeout 200 python3 benchmarks/eager_probe.py 2>&1 | tee "$OUT/eager_probe.txt"
fi
if [ "$what" = eager ] || [ "$what" = all ] || [ "$what" = check ] || [ "$what" = launch ]; then
  timeout 240 python3 benchmarks/check_cuda_elementwise.py --quick > "$OUT/check_cuda_elementwise.txt" 2>&1
  echo "check_cuda_elementwise exit $?"; tail -25 "$OUT/check_cuda_elementwise.txt"
fi
if [ "$what" = matmul ] || [ "$what" = all ] || [ "$what" = check ]; then
  timeout 120 python3 benchmarks/profile_mlp.py > "$OUT/profile_mlp.txt" 2>&1; head -60 "$OUT/profile_mlp.txt"
fi
if [ "$what" = matmul ]; then
  timeout 400 python3 -m pytest -q -p no:cacheprovider --timeout=60 tests/internals/test_cuda_matmul.py \
    tests/internals/test_cuda_elementwise.py tests/test_tensor_matmul.py tests/compiler tests/test_nn_functional.py tests/test_tensor_ops.py \
    tests/torch_differential/test_torch_nn.py tests/torch_differential/test_torch_probes.py "$@" \
    > "$OUT/matmul_tests.log" 2>&1
  echo "pytest exit $?"; grep -E "^(FAILED|ERROR)" "$OUT/matmul_tests.log" | head -60; tail -3 "$OUT/matmul_tests.log"
fi
if [ "$what" = fusion ]; then
  # the fusion tests alone (every fused kernel then compiles inside a capture), the cuda
  # launcher tests and the elementwise check
  for t in tests/internals/test_activation_hooks.py tests/compiler/test_fusion.py \
      tests/internals/test_cuda_elementwise.py tests/internals/test_cuda_matmul.py; do
    timeout 200 python3 -m pytest -q -p no:cacheprovider --timeout=60 $t 2>&1 | tail -40 \
      | grep -E "passed|failed|Error|error|^E " | head -20
  done
  timeout 240 python3 benchmarks/check_cuda_elementwise.py --quick > "$OUT/check_cuda_elementwise.txt" 2>&1
  echo "check_cuda_elementwise exit $?"; tail -8 "$OUT/check_cuda_elementwise.txt"
fi
if [ "$what" = launch ]; then
  timeout 150 python3 benchmarks/eager_probe.py > "$OUT/eager_probe.txt" 2>&1; grep "per call\|failed\|skipped" "$OUT/eager_probe.txt"
  timeout 120 python3 -m tensorplay bench --eager-only --json "$OUT/bench_eager_h200.json" \
    2>&1 | tee "$OUT/bench_eager_h200.txt" | tail -12
  timeout 150 python3 benchmarks/mlp_device_probe.py > "$OUT/mlp_device_probe.txt" 2>&1; tail -8 "$OUT/mlp_device_probe.txt"
  timeout 150 python3 benchmarks/profile_mlp.py > "$OUT/profile_mlp.txt" 2>&1; head -16 "$OUT/profile_mlp.txt"
  # eight files come back at most: the probes travel as one tarball
  rm -f "$OUT/pip_nvmath.log"
  tar -C "$OUT" -czf "$OUT/probes_h200.tar.gz" eager_probe.txt mlp_device_probe.txt profile_mlp.txt \
    && rm -f "$OUT/eager_probe.txt" "$OUT/mlp_device_probe.txt" "$OUT/profile_mlp.txt"
fi
if [ "$what" = tables ]; then
  # the given tests (TP_TESTS), then the eager table TP_RUNS times (default 2: is a row's
  # change noise?), each time first at the tree in .baseline/ when there is one (carried: `git
  # archive REV tensorplay | tar -x -C .baseline`), then the layer-by-layer probe of its slow
  # rows and the small-product probe; with TP_VERIFY=1 then what 'verify' runs
  given_tests tables_tests_cuda.log
  for r in $(seq 1 ${TP_RUNS:-2}); do
    if [ -d .baseline/tensorplay ]; then
      PYTHONPATH="$PWD/.baseline:/tmp/tp_site" timeout 120 python3 -m tensorplay bench \
        --eager-only --eager-calls 300 --json "$OUT/bench_eager_before_$r.json" \
        > "$OUT/bench_eager_before_$r.txt" 2>&1
      tail -17 "$OUT/bench_eager_before_$r.txt" | head -16 | cut -c1-110
    fi
    timeout 120 python3 -m tensorplay bench --eager-only --eager-calls 300 \
      --json "$OUT/bench_eager_$r.json" > "$OUT/bench_eager_$r.txt" 2>&1
    tail -17 "$OUT/bench_eager_$r.txt" | head -16 | cut -c1-110
  done
  timeout 150 python3 benchmarks/eager_layers_probe.py > "$OUT/eager_layers_probe.txt" 2>&1
  cat "$OUT/eager_layers_probe.txt"
  timeout 200 python3 benchmarks/small_matmul_probe.py > "$OUT/small_matmul_probe.txt" 2>&1
  cat "$OUT/small_matmul_probe.txt"
  TP_TAR=1
  [ -n "${TP_VERIFY:-}" ] && what=verify
fi
if [ "$what" = verify ] || [ "$what" = launch ]; then
  # The conformance suite, the differential tests against torch among it, runs in six pytest
  # processes over disjoint test files (the card has room; one process would take ~12 minutes),
  # and a seventh for the bench's tests: they start JAX's GPU runtime in their process, whose
  # threads' CUDA calls invalidate global-mode captures made there later (a run put them before
  # the capture stress tests and 373 tests failed after the first invalidated capture)
  python3 - <<'PY' > /tmp/tp_shards.txt
import os
alone = os.path.join("tests", "test_bench.py")
files = sorted((os.path.getsize(os.path.join(d, f)), os.path.join(d, f))
               for d, _, fs in os.walk("tests") for f in fs
               if f.startswith("test_") and f.endswith(".py"))[::-1]
shards = [[0, []] for _ in range(6)]
for size, path in files:
    if path != alone:
        shard = min(shards, key=lambda s: s[0]); shard[0] += size; shard[1].append(path)
for _, paths in shards + [[0, [alone]]]:
    print(" ".join(paths))
PY
  i=0
  while read -r files; do
    timeout 480 python3 -m pytest -q -p no:cacheprovider --timeout=90 -o faulthandler_timeout=120 \
      $files > "/tmp/tp_shard$i.log" 2>&1 &
    i=$((i+1))
  done < /tmp/tp_shards.txt
  wait
  for j in 0 1 2 3 4 5 6; do echo "=== shard $j: $(sed -n "$((j+1))p" /tmp/tp_shards.txt)"; cat "/tmp/tp_shard$j.log"; done \
    > "$OUT/conformance_cuda.log"
  grep -E "^(FAILED|ERROR)" "$OUT/conformance_cuda.log" | head -60
  for j in 0 1 2 3 4 5 6; do tail -1 "/tmp/tp_shard$j.log"; done
  timeout 60 python3 benchmarks/count_frames.py > "$OUT/count_frames_cuda.txt" 2>&1; cat "$OUT/count_frames_cuda.txt" | cut -c1-40
fi
if [ "$what" = last ]; then
  timeout 150 python3 -m tensorplay bench --json "$OUT/bench_h200.json" --plot "$OUT/bench_h200.png" \
    2>"$OUT/bench_stderr.log" | tee "$OUT/bench_h200.txt" | tail -40
  timeout 420 python3 -m pytest -q -p no:cacheprovider --timeout=60 -o faulthandler_timeout=90 \
    tests > "$OUT/conformance_cuda.log" 2>&1
  echo "pytest exit $?"; grep -E "^(FAILED|ERROR)" "$OUT/conformance_cuda.log" | head -40
  tail -3 "$OUT/conformance_cuda.log"
fi
if [ "$what" = short ]; then
  # a few minutes: the given tests (default: attention and the torch probes), then the
  # training bench
  timeout 100 python3 -m pytest -q -p no:cacheprovider ${TP_TESTS:-tests/test_nn_attention.py \
    tests/torch_differential/test_torch_probes.py tests/torch_differential/test_torch_autograd.py \
    -k "scaled or probe or linalg"} > "$OUT/short_cuda.log" 2>&1
  grep -E "^(FAILED|ERROR)" "$OUT/short_cuda.log" | cut -c1-200 | head -20; tail -1 "$OUT/short_cuda.log"
  export TENSORPLAY_BENCH_SKIP_TORCH_COMPILE=${TENSORPLAY_BENCH_SKIP_TORCH_COMPILE-1}
  timeout 70 python3 -m tensorplay bench --cases training --json "$OUT/bench_training.json" \
    2>"$OUT/bench_stderr.log" | tee "$OUT/bench_training.txt" | tail -20
  timeout 40 python3 benchmarks/profile_training_step.py > "$OUT/profile_training_step.txt" 2>&1
  head -45 "$OUT/profile_training_step.txt" | cut -c1-150
fi
if [ "$what" = autograd ]; then
  set -- tests/autograd tests/torch_differential/test_torch_autograd.py \
    "tests/test_training.py tests/test_optim.py tests/accelerator/test_graphed_callables.py tests/torch_differential/test_torch_training.py" \
    "tests/test_nn_modules.py tests/test_nn_losses.py tests/test_nn_functional.py tests/internals/test_cuda_elementwise.py" \
    "tests/torch_differential --deselect tests/torch_differential/test_torch_autograd.py --deselect tests/torch_differential/test_torch_training.py" \
    "tests/accelerator/test_control_flow.py tests/accelerator/test_device_spellings.py tests/accelerator/test_stage_and_launch.py tests/test_serialization.py tests/test_serialization_atomic.py tests/compiler"
  i=0
  for files in "$@"; do
    timeout 150 python3 -m pytest -q -p no:cacheprovider -o faulthandler_timeout=100 $files \
      > "/tmp/tp_ag$i.log" 2>&1 &
    i=$((i+1))
  done
  wait
  for j in 0 1 2 3 4 5; do echo "=== $j"; cat "/tmp/tp_ag$j.log"; done > "$OUT/autograd_cuda.log"
  grep -E "^(FAILED|ERROR)" "$OUT/autograd_cuda.log" | cut -c1-200 | head -40
  grep -E "^E   " "$OUT/autograd_cuda.log" | cut -c1-200 | sort | uniq -c | sort -rn | head -20
  for j in 0 1 2 3 4 5; do tail -1 "/tmp/tp_ag$j.log"; done
  TP_CASES=${TP_CASES:-training}; TP_TAR=1
  export TENSORPLAY_BENCH_SKIP_TORCH_COMPILE=${TENSORPLAY_BENCH_SKIP_TORCH_COMPILE-1}
  what=training
fi
if [ "$what" = training ]; then
  if [ -d .baseline/tensorplay ]; then
    PYTHONPATH="$PWD/.baseline:/tmp/tp_site" timeout 60 python3 -m tensorplay bench --eager-only \
      --eager-calls 300 \
      --json "$OUT/bench_eager_before.json" > "$OUT/bench_eager_before.txt" 2>&1
    tail -12 "$OUT/bench_eager_before.txt"
  fi
  timeout 60 python3 -m tensorplay bench --eager-only --eager-calls 300 \
    --json "$OUT/bench_eager_h200.json" > "$OUT/bench_eager_h200.txt" 2>&1
  tail -12 "$OUT/bench_eager_h200.txt"
  timeout 200 python3 -m tensorplay bench --cases "${TP_CASES:-training,mlp}" \
    --json "$OUT/bench_training.json" 2>"$OUT/bench_stderr.log" | tee "$OUT/bench_training.txt"
  tail -5 "$OUT/bench_stderr.log"
  timeout 60 python3 benchmarks/count_frames.py > "$OUT/count_frames_cuda.txt" 2>&1
  cut -c1-40 "$OUT/count_frames_cuda.txt"
fi
if [ "$what" = profile ]; then
  # where the eager training step's and the eager GPT-2 decode step's host time goes (after
  # the given tests, if any: TP_TESTS)
  given_tests profile_tests_cuda.log
  timeout 90 python3 benchmarks/profile_training_step.py 8 > "$OUT/profile_training_step.txt" 2>&1
  head -45 "$OUT/profile_training_step.txt" | cut -c1-160
  timeout 200 python3 benchmarks/profile_gpt2_decode.py > "$OUT/profile_gpt2_decode.txt" 2>&1
  head -60 "$OUT/profile_gpt2_decode.txt" | cut -c1-160
fi
if [ "$what" = rows ]; then
  # the given tests (TP_TESTS), then the bench's given cases (TP_CASES) in one run
  given_tests rows_tests_cuda.log
  timeout ${TP_BENCH_TIMEOUT:-300} python3 -m tensorplay bench --cases "${TP_CASES:-training,decode}" \
    --json "$OUT/bench_rows.json" 2>"$OUT/bench_stderr.log" | tee "$OUT/bench_rows.txt"
  tail -5 "$OUT/bench_stderr.log"
  if [ -n "${TP_EAGER:-}" ]; then   # and the eager table (the decode step's ops among it)
    timeout 120 python3 -m tensorplay bench --eager-only --eager-calls 300 \
      --json "$OUT/bench_eager.json" > "$OUT/bench_eager.txt" 2>&1
    tail -30 "$OUT/bench_eager.txt" | cut -c1-150
  fi
fi
if [ "$what" = scripts ]; then
  # the given tests (TP_TESTS), then each argument "script.py [args]" in turn, its output in
  # $OUT/<script>.txt (TP_SCRIPT_TIMEOUT seconds each)
  given_tests scripts_tests_cuda.log
  for script in "$@"; do
    name=$(basename -- "${script%% *}" .py)
    # "-m module args": named after the module and its first argument
    [ "$name" = -m ] && name=$(echo "$script" | awk '{print $2 "_" $3}' | tr -dc 'A-Za-z0-9_')
    timeout ${TP_SCRIPT_TIMEOUT:-240} python3 $script > "$OUT/$name.txt" 2>&1
    echo "=== $script: exit $?"; head -c 6000 "$OUT/$name.txt"
  done
fi
if [ "$what" = quick ]; then
  timeout 240 python3 -m pytest -q -p no:cacheprovider -x tests/internals/test_cuda.py "$@" 2>&1 \
    | tee "$OUT/quick.log" | tail -60
fi
if [ "$what" = all ] || [ "$what" = tests ] || [ "$what" = eager ] || [ "$what" = check ]; then
  timeout 380 python3 -m pytest -q -p no:cacheprovider --timeout=60 -o faulthandler_timeout=90 \
    tests "$@" > "$OUT/conformance_cuda.log" 2>&1
  echo "pytest exit $?"; grep -E "^(FAILED|ERROR)" "$OUT/conformance_cuda.log" | head -60
  tail -3 "$OUT/conformance_cuda.log"
fi
if [ "$what" = final ]; then
  timeout 120 python3 benchmarks/controlflow_probe.py > "$OUT/controlflow_probe.txt" 2>&1
  cat "$OUT/controlflow_probe.txt"
  timeout 360 python3 -m tensorplay bench --json "$OUT/bench_h200.json" --plot "$OUT/bench_h200.png" \
    2>"$OUT/bench_stderr.log" | tee "$OUT/bench_h200.txt"
  tail -5 "$OUT/bench_stderr.log"
fi
if [ "$what" = all ] || [ "$what" = bench ]; then
  timeout 60 python3 benchmarks/profile_eager.py > "$OUT/profile_eager.txt" 2>&1; grep -E "us per call" "$OUT/profile_eager.txt"
  timeout 60 python3 benchmarks/profile_graph_launch.py > "$OUT/profile_graph_launch.txt" 2>&1; grep -E "us host per call" "$OUT/profile_graph_launch.txt"
  timeout 400 python3 -m tensorplay bench --json "$OUT/bench_h200.json" --plot "$OUT/bench_h200.png" \
    2>"$OUT/bench_stderr.log" | tee "$OUT/bench_h200.txt"
  tail -5 "$OUT/bench_stderr.log"
fi
if [ "${TP_TAR:-}" = 1 ]; then
  # at most eight files come back: everything travels as one tarball
  tar -czf /tmp/tp_all.tar.gz -C "$OUT" . && find "$OUT" -mindepth 1 -delete \
    && mv /tmp/tp_all.tar.gz "$OUT/all.tar.gz"
fi

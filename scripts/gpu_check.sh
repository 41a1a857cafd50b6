#!/usr/bin/env bash
# The GPU checks of issue 31 in one prepared run (about 10 minutes on one H200; budget 12). Run from the
# repository root on a GPU node, once:
#
#     bash scripts/gpu_check.sh [OUT_DIR]          # default OUT_DIR: gpu_check/
#
# It installs the pinned requirements with CUDA jaxlib into .venv_gpu, then writes OUT_DIR/gpu_check.json with:
#   install   the install line as it ran and its exit status; jax's version, backend and devices
#   bench     scripts/bench_agents.py --sections=updates,seeds,dispatch,overhead at the paper's size (QC-FQL 4x512,
#             batch 256, h = 5): gradient steps/s, seeds x steps/s, steps/s at k = 1, 10, 100, host overhead
#   dqc       our DQC update at the paper's size (4x1024 MLPs, batch 4096, h = 25, h_a = 5): steps/s, ms/step
#   golden    the golden tests run on the GPU (the release values were recorded on CPU), with the default
#             matmul precision and with "highest": CPU-vs-GPU agreement of every loss and parameter (rtol 1e-5)
# Each part has its own time limit, so one that hangs cannot take the others' time; a part that fails is
# recorded as failed, with the tail of its output, and the next one runs.
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${1:-gpu_check}
mkdir -p "$OUT"
LOG="$OUT/gpu_check.log"
: > "$LOG"
START=$(date +%s)

part() {  # part NAME SECONDS COMMAND...: run with a limit, output to OUT/NAME.out, status to OUT/NAME.rc
  local name=$1 limit=$2
  shift 2
  echo "== $name ($(($(date +%s) - START)) s in): $*" | tee -a "$LOG"
  timeout "$limit" "$@" > "$OUT/$name.out" 2>&1
  echo $? > "$OUT/$name.rc"
  tail -3 "$OUT/$name.out" | tee -a "$LOG"
}

INSTALL='python3.11 -m venv .venv_gpu && . .venv_gpu/bin/activate && pip install -q -r requirements.txt && pip install -q "jax[cuda12]==0.6.0"'
part install 240 bash -c "$INSTALL"
# shellcheck disable=SC1091
. .venv_gpu/bin/activate
export JAX_PLATFORMS=cuda XLA_PYTHON_CLIENT_PREALLOCATE=false WANDB_MODE=disabled
part devices 60 python -c "import jax, json; print(json.dumps(dict(version=jax.__version__, backend=jax.default_backend(), devices=[str(d) for d in jax.devices()])))"
part bench 240 python scripts/bench_agents.py --sections=updates,seeds,dispatch,overhead --seeds=1,4,8 \
  --dispatch=1,10,100 --steps=100 --out="$OUT/bench.json"
part dqc 120 python scripts/bench_reference.py --worker=ours --method=dqc --h=25 --batch=4096 --hidden=1024 \
  --layers=4 --steps=50 --platform=cuda
part golden_default 90 python -m pytest -q -p no:cacheprovider tests/test_golden.py tests/test_golden_dqc.py \
  tests/test_golden_baselines.py
part golden_highest 90 env JAX_DEFAULT_MATMUL_PRECISION=highest python -m pytest -q -p no:cacheprovider \
  tests/test_golden.py tests/test_golden_dqc.py tests/test_golden_baselines.py

python - "$OUT" "$INSTALL" <<'EOF'
import json, os, sys

out, install = sys.argv[1], sys.argv[2]


def read(name):
    path = os.path.join(out, f"{name}.out")
    text = open(path).read() if os.path.exists(path) else ""
    rc = open(os.path.join(out, f"{name}.rc")).read().strip() if os.path.exists(os.path.join(out, f"{name}.rc")) else None
    return text, None if rc is None else int(rc)


def last_json(text):
    lines = [line for line in text.splitlines() if line.startswith("{")]
    return json.loads(lines[-1]) if lines else None


result = {}
text, rc = read("install")
result["install"] = dict(command=install, status=rc, tail=text[-1500:])
text, rc = read("devices")
result["devices"] = dict(status=rc, **(last_json(text) or {"tail": text[-1500:]}))
text, rc = read("bench")
bench = os.path.join(out, "bench.json")
result["bench"] = dict(status=rc, rows=json.load(open(bench)) if os.path.exists(bench) else None, tail=text[-1500:])
text, rc = read("dqc")
dqc = last_json(text)
if dqc:
    dqc["ms_per_step"] = 1000.0 / dqc["steps_per_s"]
result["dqc"] = dict(status=rc, result=dqc, tail=None if dqc else text[-1500:])
for name in ("golden_default", "golden_highest"):
    text, rc = read(name)
    result[name] = dict(status=rc, summary=(text.strip().splitlines() or [""])[-1], tail=text[-3000:] if rc else None)
with open(os.path.join(out, "gpu_check.json"), "w") as f:
    json.dump(result, f, indent=2)
print(f"wrote {os.path.join(out, 'gpu_check.json')}")
EOF
echo "done in $(($(date +%s) - START)) s" | tee -a "$LOG"

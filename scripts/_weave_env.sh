# Sourced by scripts/test in the checkout's root, beside the project's own install: creates
# .venv-weave, the interpreter of Weave's SQLite trace server that bench/bench_traces.py measures ours
# against (its smoke run in the suite runs both sides), from bench/weave-requirements.txt;
# re-installs only when that file changes. A failed install is said and leaves no venv: the other
# tests run, and the bench_traces smoke test fails.
source scripts/_python.sh
WEAVE_REQUIREMENTS=bench/weave-requirements.txt
WEAVE_STAMP=.venv-weave/.requirements-installed
WEAVE_HASH="$("$PY" -c 'import hashlib, sys; print(hashlib.sha256(open(sys.argv[1], "rb").read()).hexdigest())' "$WEAVE_REQUIREMENTS")"
if [ ! -x .venv-weave/bin/python ] || [ "$(cat "$WEAVE_STAMP" 2>/dev/null)" != "$WEAVE_HASH" ]; then
  echo "$(basename "$0"): installing Weave's trace server into .venv-weave (about a minute the first time)..." >&2
  if "$PY" -m venv .venv-weave && .venv-weave/bin/python -m pip install --quiet --upgrade pip \
    && .venv-weave/bin/python -m pip install --quiet -r "$WEAVE_REQUIREMENTS"; then
    echo "$WEAVE_HASH" > "$WEAVE_STAMP"
  else
    echo "$(basename "$0"): could not install .venv-weave; tests/bench/test_bench_traces.py will fail" >&2
    rm -rf .venv-weave
  fi
fi

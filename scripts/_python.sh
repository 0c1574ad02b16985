# Sourced by _env.sh and _weave_env.sh: PY, the interpreter their virtual environments are made
# from ($PYTHON, else python3.11, else python3).
PY="${PYTHON:-python3.11}"
command -v "$PY" >/dev/null 2>&1 || PY=python3

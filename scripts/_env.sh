# Sourced by scripts/lab and scripts/test, which set EXTRAS (e.g. "server,lab"): creates .venv if
# missing and installs the project with those extras into it. Re-installs only when pyproject.toml
# changes or an extra is missing (the stamp file holds the hash and the extras installed).
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
source scripts/_python.sh
if [ ! -x .venv/bin/python ]; then
  "$PY" -m venv .venv
fi
STAMP=.venv/.toolkit-installed
HASH="$(.venv/bin/python -c 'import hashlib; print(hashlib.sha256(open("pyproject.toml", "rb").read()).hexdigest())')"
HAVE_HASH="" HAVE_EXTRAS=""
if [ -f "$STAMP" ]; then
  read -r HAVE_HASH HAVE_EXTRAS < "$STAMP" || true
fi
[ "$HAVE_HASH" = "$HASH" ] || HAVE_EXTRAS=""
WANT="$HAVE_EXTRAS"
for extra in ${EXTRAS//,/ }; do
  case ",$WANT," in
    *",$extra,"*) ;;
    *) WANT="${WANT:+$WANT,}$extra" ;;
  esac
done
if [ "$HAVE_HASH" != "$HASH" ] || [ "$WANT" != "$HAVE_EXTRAS" ]; then
  # pip is quiet for minutes: say what happens first (only when an install does)
  echo "$(basename "$0"): installing .[$WANT] into .venv (about 3 minutes the first time)..." >&2
  .venv/bin/python -m pip install --quiet --upgrade pip
  # CPU build of torch: a looser requirement would pull a multi-GB CUDA build.
  .venv/bin/python -m pip install --quiet "torch==2.13.0"
  .venv/bin/python -m pip install --quiet -e ".[$WANT]"
  echo "$HASH $WANT" > "$STAMP"
fi
export PATH="$ROOT/.venv/bin:$PATH"

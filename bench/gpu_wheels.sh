#!/usr/bin/env bash
# The wheels bench/gpu.py needs on a GPU machine with no package index: what the server and the bench
# import that its image lacks (it has torch, transformers, peft, httpx, anyio, click, h11, jinja2,
# pyyaml, safetensors, tokenizers, huggingface_hub, numpy, matplotlib, annotated-doc, protobuf).
# Downloads them as CPython 3.12 manylinux x86_64 wheels into .whl/ (git-ignored through
# .git/info/exclude, never committed), at the versions the test suite runs with, then lists what each
# requires. Run from the repository root, where pip reaches PyPI:
#
#   bash bench/gpu_wheels.sh
#
# and on the GPU machine (carry .whl):
#
#   python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
#     --target /tmp/site .whl/*.whl && export PYTHONPATH=/tmp/site:$PWD
#
# Carried despite the image: typing-extensions (pydantic 2.14 needs >= 4.16) and protobuf (the
# version opentelemetry-proto's generated code was checked against here). fastapi imports
# opentelemetry-api (fastapi.telemetry); the server imports opentelemetry-proto (the OTLP route).
set -euo pipefail
cd "$(git rev-parse --show-toplevel)"
exclude="$(git rev-parse --git-common-dir)/info/exclude"  # a worktree shares its repository's
grep -qxF '/.whl/' "$exclude" 2>/dev/null || echo '/.whl/' >> "$exclude"
WHEELS=(
  fastapi==0.165.0
  starlette==1.10.0
  pydantic==2.14.4
  pydantic-core==2.50.5
  annotated-types==0.8.0
  typing-inspection==0.4.5
  typing-extensions==4.16.0
  uvicorn==0.55.0
  python-multipart==0.0.34
  orjson==3.13.0
  outlines-core==0.2.14
  graphql-core==3.3.2
  opentelemetry-api==1.45.2
  opentelemetry-proto==1.45.2
  protobuf==7.36.2
)
PLATFORMS=()
for p in manylinux_2_28_x86_64 manylinux_2_27_x86_64 manylinux_2_24_x86_64 manylinux_2_17_x86_64 \
  manylinux2014_x86_64 manylinux1_x86_64; do
  PLATFORMS+=(--platform "$p")
done
rm -rf .whl
python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
  "${PLATFORMS[@]}" -d .whl "${WHEELS[@]}"
for wheel in .whl/*.whl; do
  needs=$(unzip -p "$wheel" '*.dist-info/METADATA' | { grep '^Requires-Dist' || true; } \
    | { grep -v 'extra ==' || true; } | sed 's/^Requires-Dist: //' | paste -sd ';' -)
  echo "$(basename "$wheel"): ${needs:-nothing}"
done
du -sh .whl

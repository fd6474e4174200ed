#!/usr/bin/env bash
# Build llama.cpp's llama-server (CPU) from the llama.cpp that the llama-cpp-python source
# distribution vendors: llama.cpp itself is not packaged for Debian 12, and that sdist is
# the one pinned, installable copy of its source. Only the server target is built.
# The last line of stdout is the binary's path; the vendored source (convert_hf_to_gguf.py,
# gguf-py) stays beside it for the GGUF conversion. Where it cannot be built (no compiler
# that can be installed, no sdist) it prints a visible SKIP reason, prints no path, and exits
# 0; any other failure exits non-zero. A built binary is reused (keyed by the sdist version).
#   LLAMA_SERVER_DIR   where to build and cache (default: the conversions' cache root)
#   LLAMA_SERVER_JOBS  ninja's parallel jobs (default 2)
set -euo pipefail
cd "$(dirname "$0")/.."

VERSION=0.3.36  # llama-cpp-python's sdist; its vendor/llama.cpp is what gets built
CACHE=${XDG_CACHE_HOME:-$HOME/.cache}/batching-engines
DIR=${LLAMA_SERVER_DIR:-$CACHE/llama-server-$VERSION}
BIN="$DIR/bin/llama-server"
SRC="$DIR/src"  # the vendored llama.cpp tree
LOG="$DIR.log"
PY=${LLAMA_SERVER_PIP_PYTHON:-.venv/bin/python}
[[ -x $PY ]] || PY=python3

skip() { echo "SKIP llama-server: $*" >&2; exit 0; }
quiet() {  # the tool's output goes to the log; its tail is shown on failure
    "$@" >>"$LOG" 2>&1 || { tail -30 "$LOG" >&2; return 1; }
}

if [[ ! -x $BIN ]]; then
    mkdir -p "$(dirname "$DIR")"
    : >"$LOG"
    missing=()
    command -v cmake >/dev/null || missing+=(cmake)
    command -v ninja >/dev/null || missing+=(ninja-build)
    command -v c++ >/dev/null || missing+=(g++)
    if ((${#missing[@]})); then
        command -v apt-get >/dev/null && [[ $(id -u) == 0 ]] \
            || skip "needs ${missing[*]} and cannot install them (no apt-get as root)"
        echo "installing ${missing[*]} for the llama-server build" >&2
        quiet apt-get install -y --no-install-recommends "${missing[@]}" \
            || { quiet apt-get update && quiet apt-get install -y --no-install-recommends \
                 "${missing[@]}"; } || skip "apt-get could not install ${missing[*]}"
    fi
    echo "building llama-server from llama-cpp-python $VERSION's vendored llama.cpp" \
         "(about 9 min of CPU, over 20 min on a busy 2-core machine; log: $LOG)" >&2
    rm -rf "$DIR"
    mkdir -p "$DIR/dl"
    quiet "$PY" -m pip download --no-deps --no-binary :all: "llama-cpp-python==$VERSION" \
        -d "$DIR/dl" || { rm -rf "$DIR"; skip "pip could not fetch the llama-cpp-python==$VERSION sdist"; }
    tar -xzf "$DIR/dl/llama_cpp_python-$VERSION.tar.gz" -C "$DIR/dl"
    mv "$DIR/dl/llama_cpp_python-$VERSION/vendor/llama.cpp" "$SRC"
    rm -rf "$DIR/dl"
    # Only what llama-server links: no tests, examples or other tools' targets configured;
    # no web UI (it would be fetched over the network, which CI does not have); no HTTPS or
    # curl (the server serves plain HTTP on 127.0.0.1 and loads a local file); static, so the
    # one binary is the whole cache. The multimodal library (tools/mtmd) cannot be left out:
    # the server's code links it unconditionally.
    quiet cmake -S "$SRC" -B "$DIR/build" -G Ninja -DCMAKE_BUILD_TYPE=Release \
        -DBUILD_SHARED_LIBS=OFF -DLLAMA_BUILD_SERVER=ON -DLLAMA_BUILD_TOOLS=ON \
        -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF -DLLAMA_BUILD_APP=OFF \
        -DLLAMA_BUILD_UI=OFF -DLLAMA_USE_PREBUILT_UI=OFF -DLLAMA_OPENSSL=OFF \
        -DLLAMA_CURL=OFF -DGGML_BACKEND_DL=OFF
    start=$SECONDS
    quiet ninja -C "$DIR/build" -j "${LLAMA_SERVER_JOBS:-2}" llama-server
    mkdir -p "$DIR/bin"
    cp "$DIR/build/bin/llama-server" "$BIN.tmp" && mv "$BIN.tmp" "$BIN"
    rm -rf "$DIR/build"
    echo "built llama-server in $((SECONDS - start)) s" >&2
    "$BIN" --version >&2 2>&1 || true
fi
echo "$BIN"

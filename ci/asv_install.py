"""asv's install step for a per-commit environment (asv.conf.json runs it inside the env):
the torch build this runner needs, then the project's wheel with its bench extra.

Which torch (the version is TORCH_VERSION, default 2.13.0, as ci/setup.sh):
- ASV_TORCH, if set: pip arguments used as given, e.g. "torch==2.13.0 --index-url URL".
- A GPU runner (an NVIDIA driver is visible): the CUDA build. PyPI's Linux wheel of torch is
  the CUDA build, so pip runs with no config file (PIP_CONFIG_FILE=/dev/null), past any local
  wheelhouse of CPU builds; the install fails if the result cannot see CUDA.
- Otherwise, a CPU runner: the same requirement under the machine's pip configuration, as
  ci/setup.sh installs it (on this project's machines the CPU build, from local disk). A CUDA
  build there would work but is gigabytes: the script says so.

    python ci/asv_install.py WHEEL_FILE
"""

from __future__ import annotations

import os
import shlex
import subprocess
import sys
from pathlib import Path


def _gpu_runner() -> bool:
    forced = os.environ.get("ASV_TORCH_BUILD")
    if forced in ("cpu", "cuda"):
        return forced == "cuda"
    return Path("/proc/driver/nvidia/version").exists() or any(
        (Path(d) / "nvidia-smi").exists() for d in os.environ.get("PATH", "").split(os.pathsep))


def _pip(args: list[str], env: dict[str, str] | None = None) -> None:
    command = [sys.executable, "-m", "pip", "install", "--quiet", *args]
    print("asv_install:", shlex.join(command), flush=True)
    subprocess.run(command, check=True, env=env)


def _torch_cuda() -> str | None:
    probe = "import torch; print(torch.__version__, torch.version.cuda)"
    out = subprocess.run([sys.executable, "-c", probe], check=True, capture_output=True,
                         text=True).stdout.split()
    print(f"asv_install: torch {out[0]}, CUDA {out[1]}", flush=True)
    return None if out[1] == "None" else out[1]


def main(argv: list[str]) -> int:
    if len(argv) != 1:
        print(__doc__, file=sys.stderr)
        return 2
    wheel = argv[0]
    requirement = f"torch=={os.environ.get('TORCH_VERSION', '2.13.0')}"
    gpu = _gpu_runner()
    if os.environ.get("ASV_TORCH"):
        _pip(shlex.split(os.environ["ASV_TORCH"]))
    elif gpu:
        _pip([requirement], env={**os.environ, "PIP_CONFIG_FILE": os.devnull})
    else:
        _pip([requirement])
    cuda = _torch_cuda()
    if gpu and cuda is None:
        print("asv_install: a GPU runner got a CPU build of torch; set ASV_TORCH to a CUDA "
              "build's pip arguments", file=sys.stderr)
        return 1
    if not gpu and cuda is not None:
        print("asv_install: note: a CPU runner got a CUDA build of torch (it works; set "
              "ASV_TORCH to a CPU build's pip arguments to save the download)", flush=True)
    _pip([f"{wheel}[bench]"])
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))

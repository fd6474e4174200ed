"""How fast the bench's closed mix could possibly run on this core, on its own: the mix's
arithmetic at the best GEMM rate measured here on the preset's own shapes, in fp32 or bf16
(engines.bench.ceiling, which `batching-bench closed` measures beside the engines and divides
their tok/s by).

    taskset -c 0 python -m scripts.closed_ceiling [--preset small] [--dtype bfloat16] \
        [--rows 2048] [--peak GFLOPS]

--peak: this core's multiply-add peak at that dtype (scripts/fma_peak.c: fp32, and bf16 dot
products where the CPU has AVX512_BF16), for a second ceiling that no library can pass.
"""

from __future__ import annotations

import argparse

import torch

from engines.bench import draws
from engines.bench.ceiling import CALLS, DTYPES, ROWS, Ceiling, best_product, mix_flops
from engines.models import PRESETS


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--preset", default="small", choices=sorted(PRESETS))
    parser.add_argument("--dtype", default="float32", choices=DTYPES)
    parser.add_argument("--rows", type=int, default=ROWS)
    parser.add_argument("--calls", type=int, default=CALLS, help="each burst's, picking the GEMM")
    parser.add_argument("--seconds", type=float, default=2.0,
                        help="how long the picked GEMM is timed, sustained")
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--seed", type=int, default=0, help="the closed mix's draw")
    parser.add_argument("--peak", type=float, help="the core's FMA peak at --dtype, GFLOP/s")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    config = PRESETS[args.preset].config
    items = draws.closed_mix(vocab_size=config["vocab_size"], seed=args.seed)
    product, burst = best_product(config, args.dtype, rows=args.rows, calls=args.calls)
    ceiling = Ceiling(args.dtype, mix_flops(config, items), (product.sustained(args.seconds),),
                      product.which)
    print(f"{args.preset} closed mix, {args.threads} thread(s): {ceiling.line()}; "
          f"{burst.gflops:.1f} GFLOP/s in the burst that picked it")
    if args.peak:
        floor = ceiling.flops.total / (args.peak * 1e9)
        print(f"at the {args.dtype} FMA peak ({args.peak:.1f} GFLOP/s): {floor * 1e3:.0f} ms "
              f"a run, {ceiling.flops.output_tokens / floor:,.1f} output tok/s")


if __name__ == "__main__":
    main()

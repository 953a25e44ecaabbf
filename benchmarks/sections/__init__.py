"""The sections of benchmarks/gpu_check.py (`make gpu-check`), one module per check:

    plan          their order, time limits and what each proves or adds; the budget that runs
                  each, and the rule of the exit status
    common        where they run (the GPU, or the CPU for `--cpu`), peak memory, the card's memory,
                  `leaner train` through its command line
    stop          a stop signal to `leaner train` on the GPU: exit 75, the state saved, resumed
    conditioning  the float64 probe at nearest_figN's largest shape in memory-sized chunks
    p2train       a P2 fig1 variant through `leaner train`: its CUDA-graph step against eager and bf16
    vit           ViT-B/16 through `leaner train` against its step alone and its loader alone
    p2            P2's attention at the paper's largest shapes
    p2kernel      P2's many low-rank heads by each attention form, against the card's exponential limit
    ddp           `leaner train --nproc 2`, killed after a checkpoint and resumed
    commands      the sections that run a command: the decode tests, the gpu tests, the GPU benchmark rows
"""

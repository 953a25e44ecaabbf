"""The sections of benchmarks/gpu_check.py (`make gpu-check`), one module per check:

    common        where they run (the GPU, or the CPU for `--cpu`), peak memory, the card's memory
    conditioning  the float64 probe at nearest_figN's largest shape in memory-sized chunks
    vit           ViT-B/16 through `leaner train` against its step alone and its loader alone
    p2            P2's attention at the paper's largest shapes; fp32 against bf16 training
    ddp           `leaner train --nproc 2`, killed after a checkpoint and resumed
    commands      the sections that run a command: the decode tests, the gpu tests, the GPU benchmark rows
"""

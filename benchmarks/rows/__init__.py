"""The rows of benchmarks/run.py, one module per family of what they measure:

    common        what every row shares: the median with its spread, the machine line, the Markdown
                  table, another commit's source tree unpacked from git
    training      1: the training loop against a bare PyTorch loop
    loading       1b-1d: the input pipeline: data loading against the step, `decode: device`'s
                  batched augmentation against the per-image one, reading against decoding
    conditioning  2: the conditioning stage against training; batched SVD against a loop
    pipeline      the workflow around the jobs: 1e a job's start-up imports, 3 DAG resolution, 4 the
                  default study end to end, 6a the same on a GPU machine against its CPU
    gpu           5: ViT-B/16 on a GPU; 6b: P2's fig1 variant on one GPU, alone and sharing
    projection    7: the paper-scale studies priced by `leaner cost`

Each module imports the package inside its functions (row 1c runs benchmarks/run.py with another
tree's package: rows/common.py puts it first on sys.path).
"""

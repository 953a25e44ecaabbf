"""What the Snakefile reads to build the DAG, and nothing that trains: the configuration (config),
its datasets' entries (datasets), the plan of studies (plan), a grid's variants (variants), a
study's declared claims (claims), how a study's GPU request becomes Snakemake resources, groups
and checks (scheduling), the checks made while the workflow is parsed (preflight), and every
reach into Snakemake's internals (engine: the one adapter, tested against the pinned release).
It imports no torch (tests/test_workflow_layer.py imports it and plans the default config with
torch made unimportable); it reads the catalogues below it (tasks, data.kinds, outputs, grid).
Planning a study with a `lean` block is the exception: match counts parameters of models built
on torch's meta device."""

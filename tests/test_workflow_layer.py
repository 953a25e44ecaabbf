"""The workflow layer (leaner/workflow/): what the Snakefile reads to build the DAG. It imports no
torch, and the GPU policy it holds (how a study's GPU request becomes Snakemake resources,
groups and start-of-run checks; the names a profile may use) is tested here as plain functions."""

from __future__ import annotations

import copy
import subprocess
import sys

import pytest
import yaml

from leaner.compute.devices import SHARE_UNITS
from leaner.workflow.plan import build_plan
from leaner.workflow.preflight import resource_problems, unknown_study_message
from leaner.workflow.scheduling import (
    CUDA_HERE,
    CudaHere,
    gpu_problems,
    gpu_share_group,
    job_resources,
    local_gpu_limits,
    wanted_group_components,
)

from conftest import REPO, TINY

pytestmark = pytest.mark.fast


def test_the_workflow_layer_plans_the_default_config_with_torch_unimportable():
    """Import every module of the layer, and the catalogues it reads, with `import torch` failing,
    then plan config.yaml, as the Snakefile does."""
    code = (
        "import sys; sys.modules['torch'] = None\n"
        "import leaner.workflow.config, leaner.workflow.datasets, leaner.workflow.plan\n"
        "import leaner.workflow.preflight, leaner.workflow.scheduling, leaner.grid, leaner.data.kinds\n"
        "import leaner.workflow.engine, leaner.run_hooks\n"
        "plan = leaner.workflow.plan.load_plan('config.yaml')\n"
        "print(sum(len(s.variants) for s in plan.studies.values()))\n"
        "assert not [m for m, mod in sys.modules.items() if mod and m.split('.')[0] in ('torch', 'timm', 'pandas')]\n")
    proc = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    assert int(proc.stdout.split()[0]) > 10


def _plan(**resources):
    config = yaml.safe_load(TINY.read_text())
    for study in config["studies"].values():
        study["resources"].update(resources)
    return build_plan(copy.deepcopy(config))


def _never():
    raise AssertionError("CUDA was probed")


def test_a_run_without_gpus_sets_nothing_and_does_not_look_for_cuda():
    assert local_gpu_limits(_plan(), None, 2, None, probe=_never) == ({}, [])
    # a GPU study on a machine without CUDA trains on the CPU
    assert local_gpu_limits(_plan(gpu=1), None, 2, None, probe=lambda: CudaHere(0, None)) == ({}, [])


def test_gpus_found_here_are_counted_and_shared_and_given_gpus_are_not_counted_again():
    limits, problems = local_gpu_limits(_plan(gpu=1), None, 4, None, probe=lambda: CudaHere(2, None))
    assert problems == [] and limits == {"gpu": 2, "gpu_share": 2 * SHARE_UNITS}
    limits, _ = local_gpu_limits(_plan(gpu=1), 3, 4, None, probe=lambda: CudaHere(8, None))
    assert limits == {"gpu_share": 3 * SHARE_UNITS}  # --resources gpu=3 is Snakemake's already
    assert local_gpu_limits(_plan(gpu=1), 3, 4, 7, probe=lambda: CudaHere(8, None))[0] == {}  # the user's share


def test_a_study_the_machine_cannot_run_is_one_line_naming_where_the_gpus_came_from():
    _, problems = local_gpu_limits(_plan(gpu=2), None, 4, None, probe=lambda: CudaHere(1, None))
    assert len(problems) == 2 and all(f"but {CUDA_HERE}=1" in p for p in problems)
    assert problems[0].startswith("study tiny: asks for 2 GPUs per variant")
    _, problems = local_gpu_limits(_plan(gpu=1, jobs_per_gpu=4, threads=1), 1, 2, None,
                                   probe=lambda: CudaHere(1, None))
    assert problems[0] == ("study tiny: jobs_per_gpu 4 jobs of 1 threads share a GPU, which needs 4 cores at "
                           "once, but --cores is 2 (allowed: jobs_per_gpu * threads <= 2)")
    _, problems = local_gpu_limits(_plan(gpu=1), 1, 2, None, probe=lambda: CudaHere(1, "Tesla V100"))
    assert [p.split(":")[0] for p in problems] == ["study tiny"]  # bf16 asked; the P2 study trains in fp32
    assert "Tesla V100 does not support bf16" in problems[0]


def test_a_shared_gpu_is_a_fraction_a_group_and_one_gres_and_a_whole_one_is_counted():
    shared = {"gpu": 1, "jobs_per_gpu": 4, "gpu_model": "a100"}
    assert job_resources(shared) == {"gpu": 0, "gpu_share": SHARE_UNITS // 4, "gpu_model": "",
                                     "gres": "gpu:a100:1", "nodes": None, "tasks_per_gpu": 0}
    whole = {"gpu": 2, "jobs_per_gpu": 1, "gpu_model": "h100"}
    # one node: DDP's processes together; one Slurm task that sees both GPUs (no --ntasks-per-gpu)
    assert job_resources(whole) == {"gpu": 2, "gpu_share": 2 * SHARE_UNITS, "gpu_model": "h100", "gres": "",
                                    "nodes": 1, "tasks_per_gpu": 0}
    assert job_resources(whole, max_gpus=1)["gpu"] == 1  # conditioning uses one GPU
    assert job_resources(whole, max_gpus=1)["nodes"] is None
    cpu = job_resources({"gpu": 0, "jobs_per_gpu": 4, "gpu_model": ""})
    assert cpu["gpu_share"] == 0 and cpu["tasks_per_gpu"] is None
    assert gpu_share_group("s", shared) == "gpu_share_s" and gpu_share_group("s", whole) is None
    assert wanted_group_components({"s": shared, "w": whole}, {}) == {"gpu_share_s": 4}
    assert wanted_group_components({"s": shared}, {"gpu_share_s": 2}) == {"gpu_share_s": 2}  # the user's
    assert gpu_problems({"s": {**shared, "threads": 8}}, 1, None) == []  # cores unknown: nothing to check


def test_a_profiles_unknown_resource_or_rule_is_one_line_each():
    problems = resource_problems(["gpu", "slurm_partiton"], ["mem_mb"], {"train": ["runtime", "cpus"], "trian": []},
                                 ["train", "conditioning"])
    assert len(problems) == 3
    assert problems[0].startswith("resource error: --resources slurm_partiton: unknown resource (did you mean "
                                  "'slurm_partition'?) (allowed: ")
    assert "_cores" not in problems[0]
    assert problems[1].startswith("resource error: --set-resources train:cpus: unknown resource")
    assert problems[1].endswith(problems[0].split("?)")[1])
    assert problems[2] == ("resource error: --set-resources trian: no such rule (did you mean 'train'?) "
                           "(allowed: conditioning, train)")
    assert resource_problems(["gpu_share"], [], {}, []) == []


@pytest.mark.parametrize("study, hint", [("vit_digit", " (did you mean 'vit_digits'?)"), ("zzz", "")])
def test_an_unknown_study_names_the_studies_there_are(study, hint):
    assert unknown_study_message(f"results/{study}/summary.csv", study, ["vit_digits", "nearest_rank"]) == (
        f"results/{study}/summary.csv: no study named {study!r} in the config{hint} (allowed: vit_digits, "
        f"nearest_rank; see `leaner variants <config>`)")

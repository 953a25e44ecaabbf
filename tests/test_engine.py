"""Snakemake's internals, as workflow/engine.py reaches into them: each function run on a workflow
of its own, through Snakemake as users start it. A Snakemake release that changes what one of
them reads or sets fails here, not in a sweep."""

from __future__ import annotations

import json
import subprocess

import pytest

from leaner.workflow import engine

from conftest import BIN

pytestmark = pytest.mark.slow


def _snakemake(tmp_path, text: str, *args: str) -> subprocess.CompletedProcess:
    snakefile = tmp_path / "Snakefile"
    snakefile.write_text(text)
    return subprocess.run([str(BIN / "snakemake"), "-d", str(tmp_path), "-s", str(snakefile), *args],
                          capture_output=True, text=True, cwd=tmp_path)


def test_the_pinned_snakemake_is_the_one_the_engine_was_written_against():
    """A new Snakemake in the lock is read against engine.py before it is trusted."""
    import snakemake

    assert snakemake.__version__ == engine.TESTED_WITH


SETTINGS_SNAKEFILE = '''
from leaner.workflow.engine import limit_resource, set_group_components


def group(wildcards):
    set_group_components(workflow, lambda given: {"gpu_share_s": 2, **given})
    return "gpu_share_s"


rule all:
    input: expand("out/{i}", i=range(4))


rule one:
    output: "out/{i}"
    group: group
    resources: token=1
    shell: "mkdir lock && sleep 0.3 && rmdir lock && touch {output}"


onstart:
    limit_resource(workflow, "token", 1)
'''


def test_the_two_settings_made_through_snakemakes_internals_take_effect(tmp_path):
    """The group sizes set from a group function and a resource limit set at onstart. The limit
    holds (four jobs that collide if two run at once, on four cores), and on a cluster executor
    (a dry run) four jobs of a 2-per-GPU group are two group jobs, not one per job."""
    plan = _snakemake(tmp_path, SETTINGS_SNAKEFILE, "-n", "--executor", "slurm", "--jobs", "4")
    assert plan.returncode == 0, plan.stderr[-3000:]
    assert (plan.stdout + plan.stderr).count("Group job gpu_share_s") == 2
    proc = _snakemake(tmp_path, SETTINGS_SNAKEFILE, "--cores", "4")
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert sorted(p.name for p in (tmp_path / "out").iterdir()) == ["0", "1", "2", "3"]


RETRIES_SNAKEFILE = '''
from leaner.workflow.engine import retries_by_job


def decide(job):
    assert job.out_dir.name == "out" and job.name.startswith(job.rule), job
    return None if job.rule != "fail" else int(job.wildcards["n"])


retries_by_job(decide)


rule all:
    input: expand("out/{n}", n=[0, 2]), "out/other"


rule fail:
    output: "out/{n}"
    wildcard_constraints: n=r"\\d"
    retries: 5
    shell: "echo {wildcards.n} >> tries.txt; exit 1"


rule other:
    output: "out/other"
    retries: 1
    shell: "echo other >> tries.txt; exit 1"
'''


def test_retries_decided_per_job_through_snakemakes_internals(tmp_path):
    """A job whose decision is 0 runs once, one given 2 runs three times (though its rule says 5),
    and a rule the decision leaves alone keeps its own retries."""
    proc = _snakemake(tmp_path, RETRIES_SNAKEFILE, "--cores", "1", "--keep-going")
    assert proc.returncode != 0
    tries = (tmp_path / "tries.txt").read_text().split()
    assert sorted(tries) == ["0", "2", "2", "2", "other", "other"], proc.stderr[-3000:]


READINGS_SNAKEFILE = '''
import json
from leaner.workflow import engine

READ = {}


rule all:
    input: "out/a.txt", "out/b.txt"


rule make:
    output: "out/{name}.txt"
    resources: mem_mb=123
    shell: "touch {output}"


READ["names"] = engine.resource_settings(workflow)  # once every rule is defined, as the Snakefile reads it


onstart:
    jobs = engine.jobs_to_run(workflow)
    READ.update(local=engine.runs_locally(workflow), inside=engine.inside_cluster_job(workflow),
                cores=engine.global_resource(workflow, "_cores"), gpu=engine.global_resource(workflow, "gpu"),
                jobs=sorted(([j.rule, j.wildcards, str(j.out_dir), j.resources.get("mem_mb"), j.retrains]
                             for j in jobs), key=json.dumps))
    with open("readings.json", "w") as f:
        json.dump(READ, f)
'''


def test_what_the_engine_reads_of_a_run(tmp_path):
    """At onstart: the resource names the command line sets, whether the run is local, its
    limits, and every job to run with its wildcards, folder, resolved resources and whether it
    runs for new results (a forced job) or only for missing outputs."""
    (tmp_path / "out").mkdir()
    (tmp_path / "out" / "b.txt").write_text("")
    proc = _snakemake(tmp_path, READINGS_SNAKEFILE, "--cores", "3", "--resources", "gpu=2", "--default-resources",
                      "runtime=5", "--set-resources", "make:runtime=7", "--forcerun", "out/b.txt")
    assert proc.returncode == 0, proc.stderr[-3000:]
    read = json.loads((tmp_path / "readings.json").read_text())
    names, defaults, overrides, rules = read["names"]
    assert "gpu" in names and "runtime" in defaults and overrides == {"make": ["runtime"]}
    assert sorted(rules) == ["all", "make"]
    assert read["local"] is True and read["inside"] is False and read["cores"] == 3 and read["gpu"] == 2
    assert read["jobs"][1:] == [["make", {"name": "a"}, "out", 123, False], ["make", {"name": "b"}, "out", 123, True]]
    assert read["jobs"][0][:3] == ["all", {}, "None"]  # the target rule: no output

#!/usr/bin/env bash
# Installs the leaner package into the conda environment of envs/leaner.yaml (snakemake --sdm conda).
# Snakemake runs this once, right after creating the environment: it copies this file to
# <env>.post-deploy.sh beside the environment's prefix <env> (.snakemake/conda/<hash>), and runs it
# with the environment activated, in Snakemake's working directory (--directory).
#
# The install is editable and without dependencies (the environment already pins every one):
# the rules then run the workflow's current source, exactly as in the .venv that `make` builds,
# and `leaner --version` and every metrics.json record the commit of that checkout. A copy would go
# stale silently, because Snakemake rebuilds the environment only when this file or leaner.yaml
# changes, never when src/ does.
#
# The workflow source (the directory holding pyproject.toml and src/leaner) is $LEANER_SOURCE
# when that is set; otherwise the working directory or the nearest directory above it holding it.
set -euo pipefail

die() {
    echo "leaner post-deploy: $*" >&2
    exit 1
}

prefix="${0%.post-deploy.sh}"
python="$prefix/bin/python"
[[ "$0" == *.post-deploy.sh && -x "$python" ]] ||
    die "expected to run as <env>.post-deploy.sh beside the environment <env>, with <env>/bin/python (ran as $0)"

is_source() {
    [[ -f "$1/pyproject.toml" && -f "$1/src/leaner/__init__.py" ]] &&
        grep -qE '^name *= *"leaner" *$' "$1/pyproject.toml"
}

if [[ -n "${LEANER_SOURCE:-}" ]]; then
    source_dir="$LEANER_SOURCE"
    is_source "$source_dir" ||
        die "LEANER_SOURCE=$source_dir is not the leaner workflow (no pyproject.toml naming leaner beside src/leaner)"
else
    source_dir="$PWD"
    until is_source "$source_dir"; do
        [[ "$source_dir" != / ]] ||
            die "no leaner workflow in $PWD or above it (Snakemake's working directory); run Snakemake" \
                "from the checkout, or set LEANER_SOURCE=/path/to/the/checkout for a --directory outside it"
        source_dir="$(dirname "$source_dir")"
    done
fi

"$python" -m pip install --no-deps --no-build-isolation --disable-pip-version-check -e "$source_dir"
echo "leaner post-deploy: installed leaner (editable) from $source_dir into $prefix"

# Sourced by ci/setup.sh and ci/adapter-env.sh: the venvs they build live in a cache outside
# the clone, one directory per pin set, and the clone's .venv / .venv-LIB is a symlink to it, so
# a later run (another clone on the same machine, CI's next fresh clone) reuses the venv instead
# of installing gigabytes of wheels again. A fresh machine still builds it.
#
#   where:  ${BATCHING_VENV_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/batching-engines/venvs}/NAME-KEY
#           (BATCHING_VENV_CACHE set and empty turns the cache off: built in the clone, as before)
#   key:    the first 16 hex digits of the sha256 of what goes into the venv: the caller's pins
#           (an adapter's row of ci/adapter-env.sh's table; for .venv, the torch version), the
#           interpreter's full version, RECIPE below, and pyproject.toml's dependency tables
#           ([project] dependencies, optional-dependencies, requires-python; not its version,
#           entry points or tool settings: the editable install, re-pointed on use, carries
#           those)
#   clear:  rm -rf ~/.cache/batching-engines/venvs   (or one NAME-KEY directory); a clone's
#           link then dangles, and its next ci/setup.sh or ci/LIB-env.sh builds again. Do so
#           to pick up new releases of unpinned dependencies (transformers>=5.16,<6, say): a
#           cached venv keeps what its build resolved until the key changes.
#
# A directory counts as built only once its stamp (.venv-complete) is written, last, after the
# build and its import check passed; a failed or killed build leaves no stamp, and the next run
# removes it and builds again. Builds of one key are serialized by flock on NAME-KEY.lock, so
# two runs at once (two CI clones) build it once: the second waits, then reuses it. A venv is
# built in place, at its cache path (a venv cannot be moved: its scripts name its python).
#
# The editable install of this package points at one clone (setuptools' finder maps `engines`
# to that clone's path; the dist-info carries pyproject.toml's entry points). So each use
# re-points it at the calling clone, `pip install --no-deps -e .` (seconds, under the lock),
# whenever it was last pointed at another clone or another pyproject.toml (.venv-editable-for
# records which). Two clones using one cached venv at the same moment: runs from a clone's root
# (`python -m pytest`, as CI's) import `engines` from the working directory, which comes before
# the finder, so each still tests its own tree.
RECIPE=1  # bump when the way a venv is built changes: every cached venv is then rebuilt

venv_cache_root() {  # the cache's directory; empty where the cache is off
    echo "${BATCHING_VENV_CACHE-${XDG_CACHE_HOME:-$HOME/.cache}/batching-engines/venvs}"
}

venv_cache_dir() {  # name, python, pins (text): the cached venv's directory for them
    local name=$1 py=$2 pins=$3 project key root
    root=$(venv_cache_root)
    project=$("$py" -c '
import hashlib, json, sys
try:
    import tomllib
except ImportError:  # Python 3.10: the whole file, so that any change rebuilds
    print(hashlib.sha256(open("pyproject.toml", "rb").read()).hexdigest())
else:
    with open("pyproject.toml", "rb") as f:
        project = tomllib.load(f)["project"]
    keys = ("dependencies", "optional-dependencies", "requires-python")
    print(json.dumps({k: project.get(k) for k in keys}, sort_keys=True))
print(sys.version)')
    key=$(printf '%s\n' "recipe $RECIPE" "$pins" "$project" | sha256sum | cut -c1-16)
    echo "$root/$name-$key"
}

venv_cached() {  # link, cached dir, build function: the venv at link, built once into dir
    # The build function gets the directory to build into. It runs under the caller's set -e,
    # so a failed step ends the script with no stamp written (never call it in an || list:
    # bash ignores set -e there). It may remove the directory and exit 0 (a SKIP).
    local link=$1 dir=$2 build=$3 fd
    mkdir -p "$(dirname "$dir")"
    exec {fd}>"$dir.lock"
    flock "$fd"  # another run building or re-pointing this key: wait for it
    if [[ ! -f $dir/.venv-complete ]]; then
        rm -rf "$dir"
        "$build" "$dir"
        venv_editable_for >"$dir/.venv-editable-for"  # the build installed it from here
        touch "$dir/.venv-complete"
    fi
    venv_repoint "$dir"
    exec {fd}>&-
    if [[ ! -L $link || $(readlink "$link") != "$dir" ]]; then
        # A real directory there (a venv from before the cache) is the caller's to remove.
        ln -sfn "$dir" "$link.tmp-$$"
        mv -Tf "$link.tmp-$$" "$link"
    fi
}

venv_editable_for() {  # what an editable install made here is pointed at
    echo "$PWD $(sha256sum pyproject.toml | cut -c1-16)"
}

venv_repoint() {  # venv dir: its editable install at this clone and this pyproject.toml
    local dir=$1 want fd
    want=$(venv_editable_for)
    [[ -f $dir/.venv-editable-for && $(cat "$dir/.venv-editable-for") == "$want" ]] && return 0
    # One at a time: each install rewrites the clone's batching_engines.egg-info, and CI
    # re-points five venvs at once (ci/envs.sh).
    exec {fd}>"$(dirname "$dir")/editable.lock"
    flock "$fd"
    # Without build isolation where the venv's setuptools can build it (half the time: no
    # build env to install), else with it.
    "$dir/bin/python" -m pip install --no-deps --no-build-isolation -e . >>"$dir.log" 2>&1 \
        || "$dir/bin/python" -m pip install --no-deps -e . >>"$dir.log" 2>&1 \
        || { tail -20 "$dir.log" >&2; return 1; }
    exec {fd}>&-
    echo "$want" >"$dir/.venv-editable-for"
}

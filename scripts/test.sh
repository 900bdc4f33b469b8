#!/usr/bin/env bash
# Set up .venv (scripts/setup.sh) and Debian's chromium (scripts/setup_browser.sh), then run
# every test in one pytest session: the unit and integration tests in tests/ (browser tests
# included), and every notebook in notebooks/ as executed by papermill (two at a time) with
# the small parameters of notebooks/ci/<name>.yaml and interactive = True (the widgets built
# headless; tests/test_notebooks_interactive.py checks these executions, named by
# SHARDLAB_PAPERMILLED, instead of running each notebook a third time), validated by nbval
# (--nbval-lax).
# Extra arguments go to pytest (e.g. `bash scripts/test.sh -x -k plan`); SHARDLAB_TEST_WORKERS=0
# runs every test in one process (xdist's -n 2 otherwise).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
bash scripts/setup_browser.sh   # Debian's chromium for the browser tests (tests/browser.py)
export PATH="$PWD/.venv/bin:$PATH" PYTHONUNBUFFERED=1 PYDEVD_DISABLE_FILE_VALIDATION=1
build="$PWD/build/notebooks"
rm -rf "$build" && mkdir -p "$build"
# papermill NOTEBOOK: execute one notebook into $build with its CI parameters; its output goes to
# $build/NAME.log, printed whole when it fails. The notebooks are independent (each its own out_dir,
# kernel and, where it spawns ranks, a TCP store on a free port), so SHARDLAB_NOTEBOOK_JOBS of them
# (default 2, one per core) run at once.
papermill_one() {
  local nb=$1 name params
  name=$(basename "$nb" .ipynb)
  params=(-p out_dir "$PWD/build/runs/$name" -p interactive True)
  [ -f "notebooks/ci/$name.yaml" ] && params+=(-f "notebooks/ci/$name.yaml")
  echo "papermill $nb (${params[*]})"
  if ! papermill --no-progress-bar --execution-timeout 180 --cwd "$build" "${params[@]}" \
      "$nb" "$build/$name.ipynb" >"$build/$name.log" 2>&1; then
    cat "$build/$name.log" >&2
    echo "papermill $nb failed" >&2
    return 1
  fi
}
export -f papermill_one
export build
# Longest first (torchrec_planner and criteo_1tb took 50-60 s each with their CI parameters, the
# others 10-40 s), so that
# the last notebook to start does not run alone while the other core waits; then every other one.
printf '%s\n' notebooks/torchrec_planner.ipynb notebooks/criteo_1tb.ipynb notebooks/*.ipynb | awk '!seen[$0]++' |
  xargs -P "${SHARDLAB_NOTEBOOK_JOBS:-2}" -I{} bash -c 'papermill_one "$1"' _ {}
echo "papermill: every notebook executed, ${SECONDS} s into the run"
# The tests run in SHARDLAB_TEST_WORKERS processes (default 2, one per core; 0: in this process),
# each test file -- and each notebook, whose cells depend on each other -- whole in one of them.
workers=${SHARDLAB_TEST_WORKERS:-2}
dist=()
[ "$workers" != 0 ] && dist=(-n "$workers" --dist loadfile)
# The notebooks first: each is one file that runs for a minute or more, and xdist hands files out in
# collection order, so last they would leave one process working alone at the end.
SHARDLAB_PAPERMILLED="$build" python -m pytest "${dist[@]}" "$build" tests --nbval-lax --nbval-current-env \
  -p no:cacheprovider "$@"

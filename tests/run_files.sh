#!/usr/bin/env bash
# Runs the test files, one pytest process each, JOBS at a time; `make test` calls it.
#
#   tests/run_files.sh PYTHON JOBS FILE...
#
# A FILE argument may name several files separated by spaces ("tests/a.py tests/b.py"): they
# run in one pytest process (quick files, whose time would be mostly the process's start).
# Each file starts from a fresh XLA (compiled programs and fake-device settings never leak
# between files; a long single process once crashed inside XLA:CPU's compiler after
# hundreds of compilations). A file's output is printed whole when it ends, so two files'
# lines never interleave. The first failing file stops new ones from starting (xargs stops
# on exit status 255) and fails the run, like pytest -x.
set -euo pipefail
py=$1 jobs=$2
shift 2
logs=$(mktemp -d)
trap 'rm -rf "$logs"' EXIT
export py logs
printf '%s\n' "$@" | xargs -d '\n' -P "$jobs" -n 1 bash -c '
  [[ -n "${1// }" ]] || exit 0  # an empty group: nothing to run (pytest would run everything)
  log="$logs/$(basename "${1%% *}").log" start=$SECONDS status=0
  # $1 unquoted: a group of files is one pytest run.
  "$py" -m pytest -x -q -p no:cacheprovider $1 > "$log" 2>&1 || status=$?
  echo "== $1$( ((status)) && echo " FAILED") ($((SECONDS - start)) s)"; cat "$log"
  ((status == 0)) || exit 255' _

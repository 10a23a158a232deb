#!/usr/bin/env bash
# Faults under mpirun: every process ends with a clear error, nothing hangs past the timeout, no
# checkpoint is written or corrupted.
#   mpi_faults.sh MPIEXEC FAULT_BIN EMBER_CLI WORKDIR
# Environment from ctest: OMPI_ALLOW_RUN_AS_ROOT(_CONFIRM)=1, oversubscription, EMBER_DIST_TIMEOUT.
set -uo pipefail
mpiexec=$1 fault=$2 cli=$3 work=$4
rm -rf "$work" && mkdir -p "$work"
fail=0
check() {  # check NAME LOGFILE RC ELAPSED MAX_SECONDS PATTERN...
  local name=$1 log=$2 rc=$3 elapsed=$4 max=$5
  shift 5
  if [ "$rc" -eq 0 ]; then echo "FAIL $name: exit code 0"; fail=1; fi
  if [ "$elapsed" -gt "$max" ]; then echo "FAIL $name: took ${elapsed}s (limit ${max}s)"; fail=1; fi
  for pat in "$@"; do
    if ! grep -Eq -- "$pat" "$log"; then echo "FAIL $name: output lacks /$pat/"; fail=1; fi
  done
  echo "--- $name: rc=$rc, ${elapsed}s"; sed 's/^/    /' "$log" | head -40
}
run() {  # run LOG CMD... → sets rc, elapsed
  local log=$1; shift
  local t0=$SECONDS
  timeout 120 "$@" >"$log" 2>&1
  rc=$?
  elapsed=$((SECONDS - t0))
}

# 1. A rank killed mid-backward: mpirun notices and ends the job, or the survivors time out.
run "$work/kill.log" "$mpiexec" -np 2 "$fault" kill
check kill "$work/kill.log" $rc $elapsed 60 "rank 1: step 1 done" \
  "(signal 9|Killed|timed out|MPI error|exited on signal)"
if grep -q "finished (unexpected)" "$work/kill.log"; then echo "FAIL kill: a survivor finished"; fail=1; fi

# 2. A rank that stops without dying: the others' collective times out with an error naming
#    their rank and the collective; abort_job then ends the job. Ranks 0 and 1 time out at about
#    the same moment and the first one's MPI_Abort may kill the other before it prints, so one
#    survivor's report (naming itself) is what can be asserted.
run "$work/hang.log" "$mpiexec" -np 3 "$fault" hang
check hang "$work/hang.log" $rc $elapsed 60 \
  "ember_mpi_fault: rank ([01]): error: .*rank \1/3 \(mpi\): .*(all_reduce|broadcast|barrier) #[0-9]+.* failed: timed out"
if grep -q "rank 2: error" "$work/hang.log"; then echo "FAIL hang: the stopped rank reported an error"; fail=1; fi

# 3. A mismatched model on one rank (MPMD: rank 1 trains another model), with a checkpoint
#    directory: both ranks report it; no checkpoint file appears.
mkdir -p "$work/ckpt"
run "$work/model.log" "$mpiexec" -np 1 "$cli" train --model cnn --epochs 1 --max-steps 2 --save "$work/ckpt" \
  : -np 1 "$cli" train --model simple_cnn --epochs 1 --max-steps 2 --save "$work/ckpt"
check mismatched-model "$work/model.log" $rc $elapsed 90 \
  "ember: error: .*the ranks wrap different models" "rank 0" "rank 1"
if [ "$(grep -c 'the ranks wrap different models' "$work/model.log")" -lt 2 ]; then
  echo "FAIL mismatched-model: not every process reported the error"; fail=1
fi
if [ -n "$(ls -A "$work/ckpt")" ]; then echo "FAIL mismatched-model: files in the checkpoint dir"; ls -l "$work/ckpt"; fail=1; fi

# 4. A wrong world size: stale torchrun-style variables that disagree with mpirun's.
run "$work/world.log" "$mpiexec" -np 2 -x WORLD_SIZE=3 -x RANK=0 "$cli" train --epochs 1 --max-steps 1 \
  --save "$work/ckpt"
check wrong-world-size "$work/world.log" $rc $elapsed 60 \
  "ember: error: launcher environment disagrees: OMPI_COMM_WORLD_RANK/OMPI_COMM_WORLD_SIZE say rank 0 of 2 but RANK/WORLD_SIZE say rank 0 of 3" \
  "say rank 1 of 2 but RANK/WORLD_SIZE say rank 0 of 3"
if [ -n "$(ls -A "$work/ckpt")" ]; then echo "FAIL wrong-world-size: files in the checkpoint dir"; fail=1; fi

# 5. Resume: a 2-process run saves (rank 0 only); both ranks resume from it; one process may not.
run "$work/save.log" "$mpiexec" -np 2 "$cli" train --epochs 1 --max-steps 2 --eval-every 1 --save "$work/resume"
check_ok() {  # check_ok NAME LOGFILE RC PATTERN...
  local name=$1 log=$2 rc=$3
  shift 3
  if [ "$rc" -ne 0 ]; then echo "FAIL $name: exit code $rc"; fail=1; fi
  for pat in "$@"; do
    if ! grep -Eq -- "$pat" "$log"; then echo "FAIL $name: output lacks /$pat/"; fail=1; fi
  done
  echo "--- $name: rc=$rc, ${elapsed}s"; sed 's/^/    /' "$log" | tail -3
}
check_ok save "$work/save.log" $rc "2 processes"
if [ "$(grep -c 'ember train: cnn' "$work/save.log")" -ne 1 ]; then echo "FAIL save: expected one summary line (rank 0 only)"; fail=1; fi
run "$work/resume.log" "$mpiexec" -np 2 "$cli" train --resume "$work/resume" --max-steps 4
check_ok resume "$work/resume.log" $rc "2 processes"
run "$work/resume1.log" "$cli" train --resume "$work/resume" --max-steps 6
check resume-other-world-size "$work/resume1.log" $rc $elapsed 60 \
  "ember: error: --resume: the checkpoint was written by a run with 2 process\(es\) but this run has 1"

[ $fail -eq 0 ] && echo "PASS" || echo "FAIL"
exit $fail

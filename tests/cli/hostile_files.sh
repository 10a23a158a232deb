#!/usr/bin/env bash
# ember deletes, truncates or replaces only what it made (Note [Run directory ownership] in
# train/run_dir.h, Note [What an output path may be] in io/atomic_file.h): the real ember command
# against a user's directories beside its checkpoints, a lost checkpoint.json, output paths that
# name a run's own files, a character device, a block device and a FIFO made here with mknod and
# mkfifo, planted symbolic links, a metrics stream another run is writing, a replaced run's history,
# a replaced file's mode and a killed export. Every case compares what ember must not touch (inode,
# size, mode, type, link target, content) before and after, and checks the exact message.
# Needs root (mknod), as the CI containers run, and a build with `ember export` (ONNX support).
#   tests/cli/hostile_files.sh path/to/ember
source "$(dirname "$0")/harness.sh" "$1"

if [ "$(id -u)" -ne 0 ]; then
  echo "FAIL: this test makes device nodes with mknod and needs root"
  exit 1
fi
python3 "$here/make_data.py" idx idx
# One epoch of 8 steps on 256 images: a checkpoint in step-00000008/.
common0=(--data idx --batch-size 32 --optimizer adam --lr 2e-3)
common=("${common0[@]}" --epochs 1)

# fingerprint PATH...: every entry under PATH with its inode, size, mode, type and link target,
# then every regular file's SHA-256.
fingerprint() {
  find "$@" -printf '%p %i %s %m %y %l\n' 2>/dev/null | sort
  find "$@" -type f -print0 2>/dev/null | sort -z | xargs -0 -r sha256sum
}
# snapshot FILE PATH...: records PATH's fingerprint in FILE.
snapshot() {
  local f="$1"
  shift
  fingerprint "$@" >"$f"
}
# untouched NAME FILE PATH...: PATH is as `snapshot FILE PATH...` recorded it.
untouched() {
  local name="$1" f="$2"
  shift 2
  if fingerprint "$@" | cmp -s - "$f"; then ok; else
    fail "$name: changed: $(fingerprint "$@" | diff "$f" - | head -6 | tr '\n' ' ')"
  fi
}
# no_temp NAME DIR: no temporary file and no step marker anywhere under DIR.
no_temp() {
  local left
  left="$(find "$2" -name '.*.tmp-*' -o -name '.*.ember-unlisted')"
  if [ -z "$left" ]; then ok; else fail "$1: left behind: $left"; fi
}
# named_only NAME DIR [EXTRA...]: DIR's step directories are those its manifest names (and EXTRA).
named_only() {
  local got want
  got="$(cd "$2" && ls -d step-* 2>/dev/null | sort | tr '\n' ' ')"
  want="$(python3 - "$2" "${@:3}" <<'PY'
import json, os, sys
m = json.load(open(sys.argv[1] + "/checkpoint.json"))
names = {os.path.dirname(m["weights"]["path"])} | ({os.path.dirname(m["best"]["weights"]["path"])} if m["best"] else set())
print(" ".join(sorted(names | set(sys.argv[2:]))) + " ")
PY
)"
  if [ "$got" = "$want" ]; then ok; else fail "$1: step directories $got, wanted $want"; fi
}
manifest_field() { python3 -c "import json,sys; print(json.load(open(sys.argv[1] + '/checkpoint.json'))$2)" "$1"; }

run own train "${common[@]}" --save own --quiet
expect_rc own 0

# ---- 1. a user's directories beside the checkpoints ----------------------------------------------
# Names that start like ember's, a backup copy, and a copy under an exact step name: none is
# ember's, whatever happens to the checkpoints around them.
mkdir -p notes/step-by-step-notes notes/step-00000024-keep
echo "my notes" >notes/step-by-step-notes/todo.txt
run notes train "${common[@]}" --save notes
expect_rc notes 0
cp -a notes/step-00000008/. notes/step-00000024-keep/
cp -a notes/step-00000008 notes/step-00000003
snapshot notes.fp notes/step-by-step-notes notes/step-00000024-keep notes/step-00000003
run notes-more train --resume notes --epochs 3  # two more saves, each removing the checkpoint before
expect_rc notes-more 0
untouched notes notes.fp notes/step-by-step-notes notes/step-00000024-keep notes/step-00000003
if [ "$(manifest_field notes "['step']")" = 24 ]; then ok; else fail "notes: not resumed to step 24"; fi
named_only notes notes step-00000003 step-00000024-keep step-by-step-notes
no_temp notes notes

# ---- 2. a lost checkpoint.json --------------------------------------------------------------------
cp -a own lost
rm lost/checkpoint.json
snapshot lost.fp lost
expect_error "--save: 'lost' holds 1 checkpoint directory (step-00000008) but no checkpoint.json that names them: they may be complete checkpoints whose manifest was lost, and ember does not remove them; move them away, or pass --overwrite to replace them with this run" \
  train "${common[@]}" --save lost
untouched lost lost.fp lost
# --overwrite says what it replaces, by count and name, even with --quiet, and replaces it at the
# first save.
run lost-ow train "${common[@]}" --save lost --overwrite --quiet
expect_rc lost-ow 0
expect_line lost-ow lost-ow.err "ember train: --overwrite: this run's first save replaces 4 earlier file(s) and director(ies) in lost: step-00000008/, metrics.jsonl, evaluation.json, report.html"
if [ ! -e lost/step-00000008 ] && [ -d "lost/$(dirname "$(manifest_field lost "['weights']['path']")")" ]; then ok; else
  fail "lost-ow: $(ls -A lost)"; fi
if [ "$(grep -c '"event":"config"' lost/metrics.jsonl)" = 1 ]; then ok; else fail "lost-ow: the old history is still there"; fi
no_temp lost-ow lost

# ---- 3. what an interrupted save left is removed, and said so even with --quiet ---------------------
EMBER_FAULT=crash:save:after-state run crash train "${common[@]}" --save crash --quiet
expect_rc crash 137
run crash-again train "${common[@]}" --save crash --quiet
expect_rc crash-again 0
expect_line crash-again crash-again.err "ember train: removed 4 file(s) left in crash by an interrupted save: step-00000008/model.safetensors, step-00000008/state.safetensors, step-00000008/, .step-00000008.ember-unlisted"
expect_line crash-again crash-again.err "ember train: crash holds the metrics.jsonl of an earlier run that saved no checkpoint; this run's first save replaces it"
no_temp crash-again crash

# ---- 4. output paths that name a run's own files ---------------------------------------------------
cp -a own outs  # a copy: own is the source of the later cases, whatever happens here
snapshot outs.fp outs
expect_error "--save-weights 'outs/checkpoint.json' is the checkpoint manifest of the run in 'outs'; ember does not write other output over a run's own files: name another file" \
  train "${common[@]}" --save-weights outs/checkpoint.json
expect_error "--out 'outs/metrics.jsonl' is the metrics stream of the run in 'outs'; ember does not write other output over a run's own files: name another file" \
  report outs --out outs/metrics.jsonl
expect_error "export: the output 'outs/step-00000008/model.onnx' is inside the checkpoint directory 'outs/step-00000008' of the run in 'outs'; ember does not write other output over a run's own files: name another file" \
  export outs outs/step-00000008/model.onnx
expect_error "export: the output 'outs/checkpoint.json' is the checkpoint manifest of the run in 'outs'; ember does not write other output over a run's own files: name another file" \
  export outs outs/checkpoint.json
expect_error "--profile-trace 'outs/evaluation.json' is the last evaluation of the run in 'outs'; ember does not write other output over a run's own files: name another file" \
  train "${common[@]}" --max-steps 1 --profile-trace outs/evaluation.json
expect_error "--metrics 'outs/checkpoint.json' is the checkpoint manifest of the run in 'outs'; ember does not write other output over a run's own files: name another file" \
  train "${common[@]}" --max-steps 1 --metrics outs/checkpoint.json
untouched outs outs.fp outs
# A new run's own directory, before it has saved anything.
expect_error "--save-weights 'fresh/metrics.jsonl' is the metrics stream of the run in 'fresh'; ember does not write other output over a run's own files: name another file" \
  train "${common[@]}" --save fresh --save-weights fresh/metrics.jsonl
# A report may replace a run's report.html.
run outs-report report outs --out outs/report.html
expect_rc outs-report 0

# ---- 5. device nodes, a FIFO and links are never replaced -----------------------------------------
mkdir dev
mknod dev/null c 1 3
chmod 666 dev/null
mknod dev/disk b 7 200
mkfifo dev/pipe
echo "the user's file" >victim.txt
ln -s ../victim.txt dev/link.onnx
ln -s /dev/null dev/null-link
snapshot dev.fp dev victim.txt /dev/null
run dev-export export own dev/null
expect_rc dev-export 0
run dev-report report own --out dev/null
expect_rc dev-report 0
run dev-train train "${common[@]}" --max-steps 2 --save-weights dev/null --profile-trace dev/null-link --metrics dev/null
expect_rc dev-train 0
run dev-link export own dev/null-link
expect_rc dev-link 0
expect_error "export: dev/disk: is a block device; ember writes only regular files, character devices and FIFOs" \
  export own dev/disk
expect_error "export: dev/link.onnx: is a symbolic link to '../victim.txt'; ember writes through a link only to a character device or a FIFO, never to a file: name the file itself" \
  export own dev/link.onnx
expect_error "--save-weights: dev/link.onnx: is a symbolic link to '../victim.txt'; ember writes through a link only to a character device or a FIFO, never to a file: name the file itself" \
  train "${common[@]}" --save-weights dev/link.onnx
# A FIFO without a reader: an error at once, never a hang.
start=$SECONDS
expect_error "dev/pipe: is a FIFO that no process reads; ember writes to a FIFO only while it has a reader" \
  export own dev/pipe
if [ $((SECONDS - start)) -le 30 ]; then ok; else fail "dev/pipe: took $((SECONDS - start)) s"; fi
untouched dev dev.fp dev victim.txt /dev/null
# With a reader, the FIFO gets the bytes and stays a FIFO.
timeout 60 cat dev/pipe >fifo.html &
reader=$!
run dev-fifo report own --out dev/pipe
expect_rc dev-fifo 0
wait $reader
if head -c 15 fifo.html | grep -q '<!DOCTYPE html>'; then ok; else fail "dev-fifo: the reader got $(head -c 40 fifo.html)"; fi
untouched dev-fifo dev.fp dev victim.txt /dev/null
no_temp dev dev

# ---- 6. a replaced file keeps its mode ----------------------------------------------------------------
touch out.onnx
chmod 640 out.onnx
run mode export own out.onnx
expect_rc mode 0
if [ "$(stat -c %a out.onnx)" = 640 ]; then ok; else fail "mode: out.onnx is now $(stat -c %a out.onnx)"; fi

# ---- 7. the metrics stream ------------------------------------------------------------------------------
# A symlink planted at a run's metrics.jsonl is refused, and what it points to stays as it was.
cp -a own planted
rm planted/metrics.jsonl
ln -s ../victim.txt planted/metrics.jsonl
snapshot planted.fp planted victim.txt
expect_error "--save: 'planted/metrics.jsonl' is a symbolic link to '../victim.txt'; a run directory's own files must be regular files, and ember neither writes through nor replaces anything else (remove it, or save into another directory)" \
  train --resume planted --epochs 2
untouched planted planted.fp planted victim.txt
# A second writer of a live run's stream is refused before it can truncate it.
EMBER_FAULT=slow-step-ms:200 "$ember" train "${common0[@]}" --epochs 4 --save live --metrics live.jsonl >live.out 2>live.err &
pid=$!
while [ ! -e live/checkpoint.json ] && kill -0 $pid 2>/dev/null; do sleep 0.05; done
lines_before=$(wc -l <live.jsonl)
expect_error "cannot write metrics file 'live.jsonl': another ember run is writing it (it holds the file's lock); name another file, or wait for that run to end" \
  train "${common[@]}" --metrics live.jsonl
expect_error "--metrics 'live/metrics.jsonl' is the metrics stream of the run in 'live'; ember does not write other output over a run's own files: name another file" \
  train "${common[@]}" --metrics live/metrics.jsonl
if [ "$(wc -l <live.jsonl)" -ge "$lines_before" ] && head -1 live.jsonl | grep -q '"event":"config"'; then ok; else
  fail "live: the stream was cut"; fi
kill -INT $pid
wait $pid
# --overwrite keeps the old history until the new run's first save: a run killed before it saved
# leaves the old run's files as they were.
cp -a own ow
ow_files=(ow/checkpoint.json ow/step-00000008 ow/metrics.jsonl ow/evaluation.json ow/report.html)
snapshot ow.fp "${ow_files[@]}"
EMBER_FAULT=crash:save:begin run ow-crash train "${common[@]}" --save ow --overwrite
expect_rc ow-crash 137
untouched ow-crash ow.fp "${ow_files[@]}"
run ow-new train "${common[@]}" --save ow --overwrite
expect_rc ow-new 0
# The new run's stream that SIGKILL left beside the old one is removed by the next run, by name.
if grep -q "^ember train: removed 1 file(s) left in ow by an interrupted save: \.metrics\.jsonl\.tmp-[0-9]*-[0-9]*-[0-9]*$" ow-new.err; then ok; else
  fail "ow-new: $(cat ow-new.err)"; fi
if [ "$(grep -c '"event":"config"' ow/metrics.jsonl)" = 1 ] &&
  [ "$(python3 -c "import json; print(json.loads(open('ow/metrics.jsonl').readline())['overwrite'])")" = True ]; then ok; else
  fail "ow-new: metrics.jsonl is not the new run's"; fi
no_temp ow-new ow

# ---- 8. a killed export leaves no temporary file -------------------------------------------------
EMBER_FAULT=slow-rename-ms:20000 "$ember" export own killed.onnx >killed.out 2>killed.err &
pid=$!
for _ in $(seq 200); do
  ls -A | grep -q '^\.killed\.onnx\.tmp-' && break
  sleep 0.05
done
if ls -A | grep -q '^\.killed\.onnx\.tmp-'; then ok; else fail "killed: no temporary file appeared"; fi
kill -TERM $pid
wait $pid
rc=$?
expect_rc killed 143
if [ -z "$(ls -A | grep 'killed\.onnx')" ]; then ok; else fail "killed: left $(ls -A | grep 'killed\.onnx')"; fi

finish

#!/usr/bin/env bash
# Runs that never lose or corrupt work: the ember command against bad option values, divergence,
# crashes inside every stage of a save, a disk that fills up between two files, interrupts, two
# runs in one directory, damaged or mixed checkpoint files and inputs that do not fit. Each case
# asserts the exact message, the exit code, and that the directory afterwards resumes bit-exactly
# (the final weights equal an uninterrupted run's, tensor for tensor) or is refused clearly.
# Faults come from the EMBER_FAULT testing hook (Note [Fault injection] in io/fault.h).
#   tests/cli/robust.sh path/to/ember
source "$(dirname "$0")/harness.sh" "$1"

python3 "$here/make_data.py" idx idx
python3 "$here/make_data.py" idx idx-small-test 20
python3 "$here/make_data.py" folder one-class 1
# Two epochs of 8 steps on 256 images.
common1=(--data idx --batch-size 32 --optimizer adam --lr 2e-3)
common=("${common1[@]}" --epochs 2)

# last_weights DIR: the weights file the manifest of DIR names.
last_weights() { python3 -c "import json,sys; print(sys.argv[1] + '/' + json.load(open(sys.argv[1] + '/checkpoint.json'))['weights']['path'])" "$1"; }
# same_as_reference NAME DIR: DIR's last weights equal the uninterrupted run's, bit for bit.
same_as_reference() {
  if python3 "$here/tensors_equal.py" "$(last_weights ref)" "$(last_weights "$2")"; then ok; else fail "$1: weights differ from the uninterrupted run"; fi
}
# clean NAME DIR: no temporary file and no step directory the manifest does not name.
clean() {
  local extra
  extra="$(python3 - "$2" <<'PY'
import json, os, sys
d = sys.argv[1]
m = json.load(open(f"{d}/checkpoint.json"))
named = {os.path.dirname(m["weights"]["path"])} | ({os.path.dirname(m["best"]["weights"]["path"])} if m["best"] else set())
for root, dirs, files in os.walk(d):
    for f in files:
        if ".tmp-" in f or f.endswith(".ember-unlisted"): print(os.path.join(root, f))
for e in os.listdir(d):
    if e.startswith("step-") and e not in named: print(e)
PY
)"
  if [ -n "$extra" ]; then fail "$1: left behind: $extra"; else ok; fi
}

# ---- 1. every invalid option value, at parse time -------------------------------------------
expect_error "--batch-size must be at least 1, got -5" train --batch-size -5
expect_error "--epochs must be at least 1, got -3" train --epochs -3
expect_error "--lr must be a positive finite number, got -1" train --lr -1
expect_error "--lr must be a positive finite number, got inf" train --lr inf
expect_error "--lr must be a positive finite number, got 1e400" train --lr 1e400
expect_error "--weight-decay must be a finite number >= 0, got -1" train --weight-decay -1
expect_error "--label-smoothing must be in [0, 1), got -0.5" train --label-smoothing -0.5
expect_error "--label-smoothing must be in [0, 1), got 1" train --label-smoothing 1
expect_error "--warmup-epochs must be a finite number >= 0, got -1" train --warmup-epochs -1
expect_error "--momentum must be in [0, 1), got 1" train --momentum 1
expect_error "--clip-grad-norm must be a positive finite number, got 0" train --clip-grad-norm 0
expect_error "--val-split must be in (0, 1), got 1.5" train --val-split 1.5
expect_error "--image-size must be at least 8, got 4" train --image-size 4
expect_error "--eval-every must be at least 1, got 0" train --eval-every 0
expect_error "--eval-limit must be 0 (all) or a positive count, got -1" train --eval-limit -1
expect_error "--max-steps must be at least 1, got 0" train --max-steps 0
expect_error "--threads must be 0 (all cores) or a positive count, got -1" train --threads -1
expect_error "--workers must be non-negative, got -2" train --workers -2
expect_error "--log-every must be at least 1, got 0" train --log-every 0
expect_error "--batch-size must be at least 1, got 0" eval ref --batch-size 0
expect_error "--top must be at least 1, got 0" predict ref x.png --top 0
expect_error "--lr: 'abc' is not a number" train --lr abc
expect_error "--epochs: '2.5' is not an integer" train --epochs 2.5
expect_error "--seed must be a non-negative integer, got -1" train --seed -1
expect_error "--data-dir applies to --data fashion-mnist or mnist; --data 'idx' names the directory itself" \
  train --data idx --data-dir elsewhere
expect_error "--warmup-epochs must be less than --epochs (2), got 3" train "${common[@]}" --warmup-epochs 3
expect_error "--val applies to ImageFolder data only, and --data fashion-mnist is IDX data (docs/data.md)" train --val x
expect_error "--cache applies to ImageFolder data only, and 'idx' holds IDX files (docs/data.md)" train "${common[@]}" --cache c
expect_error "--init-weights cannot be used with --resume (the run continues from the weights in 'r')" \
  train --resume r --init-weights w.safetensors
expect_error "The following argument was not expected: --bogus" train --bogus
expect_error "unknown command 'trian' (did you mean 'train'?); the commands are train, eval, predict, export, report, inspect, lab, bench and info (ember --help)" trian
touch a-file
expect_error "--save: 'a-file' is a file, not a directory" train "${common[@]}" --save a-file
mkdir -p a-dir
expect_error "--save-weights 'a-dir' is a directory; name a file in it, e.g. 'a-dir/model.safetensors'" \
  train "${common[@]}" --save-weights a-dir
# --help is not an error.
run help train --help
expect_rc help 0

# ---- 2. inputs that do not fit ------------------------------------------------------------------
expect_error "--data 'one-class' has 1 class ('class0'): a classifier needs at least 2 class subdirectories" \
  train --data one-class --epochs 1
expect_error "'idx-small-test': the test images are 1x20x20 but the training images are 1x28x28; both splits must have the same image size" \
  train --data idx-small-test --epochs 1

# An image over the size limit: `inspect` and `train` say the same.
python3 "$here/make_data.py" folder big 2
python3 - <<'PY'
import struct, zlib
w, h = 40000, 2
raw = b"".join(b"\0" + bytes(w) for _ in range(h))
chunk = lambda t, d: struct.pack(">I", len(d)) + t + d + struct.pack(">I", zlib.crc32(t + d) & 0xFFFFFFFF)
open("big/class0/wide.png", "wb").write(b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", struct.pack(">IIBBBBB", w, h, 8, 0, 0, 0, 0)) +
                                      chunk(b"IDAT", zlib.compress(raw)) + chunk(b"IEND", b""))
PY
run big-inspect inspect big
expect_line big-inspect big-inspect.out "  big/class0/wide.png: PNG image of 40000x2 has a side longer than the limit of 32768 pixels"
expect_error "big/class0/wide.png: PNG image of 40000x2 has a side longer than the limit of 32768 pixels" \
  train --data big --image-size 8 --epochs 1 --batch-size 8 --optimizer adam

# ---- 3. the reference: an uninterrupted run -----------------------------------------------------
run ref train "${common[@]}" --save ref --metrics ref.jsonl
expect_rc ref 0
if grep -qE '^ember train: cnn on idx, 2 epochs, test accuracy [0-9.]+%, [0-9]+ images/s, ' ref.out; then ok; else
  fail "ref: summary: $(cat ref.out)"; fi
# --max-steps inside epoch 1 says so in the summary.
run maxsteps train "${common[@]}" --max-steps 3
expect_rc maxsteps 0
if grep -q '^ember train: cnn on idx, stopped by --max-steps at step 3 in epoch 1 of 2, test accuracy' maxsteps.out; then ok; else
  fail "maxsteps: summary: $(cat maxsteps.out)"; fi

# ---- 4. a crash inside every stage of a save, then resume ---------------------------------------
# @2: the second time the point is reached (the save at the end of epoch 2, or the best pointer of
# epoch 1 for the manifest points), so an earlier checkpoint exists; atomic:before-rename@5: the
# fifth file written (1 weights, 2 state, 3 manifest, 4 evaluation.json, 5 the manifest with the
# best pointer).
for point in save:begin@2 save:after-weights@2 save:after-state@2 save:before-manifest@2 atomic:before-rename@5 \
  save:after-manifest@2; do
  d="crash-${point%@*}"
  d="${d//:/-}"
  EMBER_FAULT="crash:$point" run "$d" train "${common[@]}" --save "$d"
  expect_rc "$d" 137
  run "$d-resume" train --resume "$d"  # no --save: resuming keeps saving into the directory
  expect_rc "$d-resume" 0
  same_as_reference "$d" "$d"
  clean "$d" "$d"
done
# Stale files from an interrupted save are removed, and said so, by name.
if grep -q '^ember train: removed [0-9]* file(s) left in crash-atomic-before-rename by an interrupted save: \.checkpoint\.json\.tmp-[0-9]*-[0-9]*-[0-9]*$' \
  crash-atomic-before-rename-resume.err; then ok; else fail "no 'removed' message after a crash before a rename"; fi
# A crash in the very first save leaves no checkpoint: resume refuses.
EMBER_FAULT="crash:save:after-state" run first train "${common[@]}" --save first
expect_rc first 137
expect_error "--resume: 'first' holds no checkpoint (no checkpoint.json; nothing was saved there, or it was written by an older ember)" \
  train --resume first

# ---- 5. a disk that fills up between two files, and in the metrics file --------------------------
# Files: 1 model, 2 state, 3 manifest, 4 evaluation.json, 5 manifest (best) in epoch 1; 6 (model) fails.
EMBER_FAULT=enospc-file:6 run full train "${common[@]}" --save full
expect_rc full 1
expect_line full full.err "ember: error: full/step-00000016/model.safetensors: cannot write temporary file: No space left on device"
run full-resume train --resume full
expect_rc full-resume 0
same_as_reference full full
clean full full
# The state file of the first save fails: nothing is visible, resume refuses.
EMBER_FAULT=enospc-file:2 run full2 train "${common[@]}" --save full2
expect_line full2 full2.err "ember: error: full2/step-00000008/state.safetensors: cannot write temporary file: No space left on device"
if [ ! -e full2/checkpoint.json ]; then ok; else fail "full2: a manifest appeared"; fi
# Metrics: the third line fails half-way; the file keeps two whole lines.
EMBER_FAULT=enospc-metrics:3 run mfull train "${common[@]}" --metrics mfull.jsonl
expect_line mfull mfull.err "ember: error: cannot write metrics file 'mfull.jsonl': No space left on device"
if python3 -c "import json,sys; lines=open('mfull.jsonl').read().split('\n'); assert lines[-1]=='' and len(lines)==3, lines; [json.loads(l) for l in lines[:-1]]"; then ok; else
  fail "mfull: the metrics file is not two whole lines"; fi

# ---- 6. SIGINT / SIGTERM at a random step, then resume ------------------------------------------
# One signal in each epoch (after steps 1-7 and 9-14 of 16), each resumed to the uninterrupted weights.
for sig in INT TERM; do
  if [ $sig = INT ]; then step=$((RANDOM % 7 + 1)); else step=$((RANDOM % 6 + 9)); fi
  d="int-$sig"
  EMBER_FAULT=slow-step-ms:100 "$ember" train "${common[@]}" --save "$d" --metrics "$d.jsonl" >"$d.out" 2>"$d.err" &
  pid=$!
  while [ "$(steps_in "$d.jsonl")" -lt "$step" ] && kill -0 $pid 2>/dev/null; do sleep 0.02; done
  kill -$sig $pid
  wait $pid
  rc=$?
  expect_rc "$d" 130
  got="$(grep '^ember train: interrupted at step' "$d.err")"
  if [[ "$got" =~ ^ember\ train:\ interrupted\ at\ step\ ([0-9]+)\ \(epoch\ [12]\ of\ 2\)\;\ checkpoint\ saved\ in\ $d\;\ continue\ with:\ ember\ train\ --resume\ $d$ ]]; then
    ok
    stopped="${BASH_REMATCH[1]}"
    if [ "$(python3 -c "import json,sys; print(json.load(open(sys.argv[1] + '/checkpoint.json'))['step'])" "$d")" = "$stopped" ] &&
      [ "$stopped" -ge "$step" ] && [ "$stopped" -le 16 ]; then ok; else fail "$d: checkpoint step, signal after step $step"; fi
  else
    fail "$d: message: $(cat "$d.err")"
  fi
  if tail -1 "$d.jsonl" | grep -q '"event":"summary".*"interrupted":true'; then ok; else fail "$d: no summary line"; fi
  run "$d-resume" train --resume "$d"
  expect_rc "$d-resume" 0
  same_as_reference "$d" "$d"
done
# A second interrupt exits at once, without saving.
EMBER_FAULT=slow-step-ms:400 "$ember" train "${common[@]}" --save int2 --metrics int2.jsonl >int2.out 2>int2.err &
pid=$!
while [ "$(steps_in int2.jsonl)" -lt 1 ] && kill -0 $pid 2>/dev/null; do sleep 0.02; done
kill -INT $pid
sleep 0.1
kill -INT $pid
wait $pid
rc=$?
expect_rc int2 130
expect_line int2 int2.err "ember train: interrupted again; exiting now without saving"
if [ ! -e int2/checkpoint.json ]; then ok; else fail "int2: a checkpoint was written after the second interrupt"; fi

# ---- 7. two runs, one directory -----------------------------------------------------------------
EMBER_FAULT=slow-step-ms:200 "$ember" train "${common[@]}" --save lock --metrics lock.jsonl >lock.out 2>lock.err &
pid=$!
while [ "$(steps_in lock.jsonl)" -lt 1 ] && kill -0 $pid 2>/dev/null; do sleep 0.02; done
expect_error "--save: another ember run is writing into 'lock' (it holds the directory's lock); wait for it to end or save into another directory" \
  train "${common[@]}" --save lock --overwrite
kill -INT $pid
wait $pid
expect_error "--save: 'ref' already holds a checkpoint; continue it with --resume ref, or pass --overwrite to replace it with this run" \
  train "${common[@]}" --save ref

# ---- 8. files that do not belong together -------------------------------------------------------
cp -r ref flip
f="$(last_weights flip)"
python3 -c "import sys; p=sys.argv[1]; b=bytearray(open(p,'rb').read()); b[-100]^=1; open(p,'wb').write(b)" "$f"
crc="$(python3 -c "import json; m=json.load(open('flip/checkpoint.json')); print(m['weights']['crc32'])")"
size="$(stat -c %s "$f")"
actual="$(python3 -c "import zlib,sys; print('crc32:%08x' % zlib.crc32(open(sys.argv[1],'rb').read()))" "$f")"
want="$f: does not match flip/checkpoint.json ($size bytes, $actual; the manifest says $size bytes, $crc): the file was changed or damaged after it was saved, or comes from another checkpoint; this checkpoint cannot be used"
expect_error "$want" train --resume flip
expect_error "$want" eval flip
expect_error "$want" predict flip idx/t10k-images-idx3-ubyte:0
# A weights file copied in from another run.
cp -r ref mixed
cp "$(last_weights crash-save-begin)" "$(last_weights mixed)"
if "$ember" eval mixed 2>&1 >/dev/null | grep -q "^ember: error: $(last_weights mixed): does not match mixed/checkpoint.json"; then ok; else
  fail "mixed: a weights file from another run was accepted"; fi
# A standalone weights file with a flipped data byte.
run sw train "${common1[@]}" --epochs 1 --save-weights new/folder/w.safetensors
expect_rc sw 0
python3 -c "import sys; p=sys.argv[1]; b=bytearray(open(p,'rb').read()); b[-100]^=1; open(p,'wb').write(b)" new/folder/w.safetensors
if "$ember" eval new/folder/w.safetensors --data idx 2>&1 >/dev/null |
  grep -q "^ember: error: new/folder/w.safetensors: the tensors do not match the file's checksum (crc32:[0-9a-f]*, the file says crc32:[0-9a-f]*): the file was damaged or edited after it was written$"; then ok; else
  fail "sw: a damaged weights file was accepted"; fi

# ---- 9. resume means resume ----------------------------------------------------------------------
expect_error "--resume: --lr 0.1 conflicts with the saved run's 0.002; a resumed run keeps its configuration (start a new run with --save to change it)" \
  train --resume ref --lr 0.1
expect_error "--resume: --no-augment conflicts with the saved run, which ran with augmentation on; a resumed run keeps its configuration (start a new run with --save to change it)" \
  train --resume ref --no-augment
expect_error "--resume: --model simple_cnn conflicts with the saved run's cnn; a resumed run keeps its configuration (start a new run with --save to change it)" \
  train --resume ref --model simple_cnn
expect_error "--resume: --augment trivial conflicts with the saved run's light; a resumed run keeps its configuration (start a new run with --save to change it)" \
  train --resume ref --augment trivial
expect_error "--resume: --mixup 0.2 conflicts with the saved run's 0; a resumed run keeps its configuration (start a new run with --save to change it)" \
  train --resume ref --mixup 0.2
cp -r ref more
run more train --resume more --epochs 3 --metrics more.jsonl
expect_rc more 0
if grep -q "^ember train: resuming run [0-9a-f]* from more at step 16 (2 epoch(s) done); changed: epochs 3, metrics more.jsonl$" more.err; then ok; else
  fail "more: $(cat more.err)"; fi
if [ "$(python3 -c "import json; print(json.load(open('more/checkpoint.json'))['step'])")" = 24 ]; then ok; else fail "more: not saved into more/"; fi

# ---- 10. divergence -----------------------------------------------------------------------------
run div train --data idx --epochs 1 --batch-size 32 --optimizer sgd --lr 1e4 --save div --metrics div.jsonl
expect_rc div 1
if grep -qE "^ember: error: training diverged at step [0-9]+ \(epoch 1\): the loss is (NaN|infinite); the last finite loss was [0-9.e+]+ at step [0-9]+\. Lower --lr \(10000\), add --clip-grad-norm 1 or use --warmup-epochs$" div.err; then ok; else
  fail "div: $(cat div.err)"; fi
if [ ! -e div/checkpoint.json ]; then ok; else fail "div: a checkpoint was written"; fi
if grep -q '"event":"diverged"' div.jsonl; then ok; else fail "div: no diverged event"; fi

# A NaN loss at step 12 (EMBER_FAULT=nan-loss-at, in epoch 2) while the loss is read every 100 steps
# only: the error still names step 12 and the last finite step 11; the step-8 checkpoint stays.
EMBER_FAULT=nan-loss-at:12 run nan train "${common[@]}" --log-every 100 --save nan --metrics nan.jsonl
expect_rc nan 1
if grep -qE "^ember: error: training diverged at step 12 \(epoch 2\): the loss is NaN; the last finite loss was [0-9.e+-]+ at step 11; the checkpoint in 'nan' \(step 8\) is untouched\. Lower --lr \(0\.002\), add --clip-grad-norm 1 or use --warmup-epochs$" nan.err; then ok; else
  fail "nan: $(tail -1 nan.err)"; fi
if python3 -c "import json,sys; d=[e for e in map(json.loads, open('nan.jsonl')) if e['event']=='diverged']; sys.exit(0 if len(d)==1 and d[0]['step']==12 and d[0]['epoch']==2 else 1)"; then ok; else
  fail "nan: no diverged event for step 12 in epoch 2"; fi

# A divergence after the first checkpoint: that checkpoint stays, whole and finite, and is used.
run div2 train --data idx --epochs 4 --batch-size 32 --optimizer sgd --scheduler onecycle --lr 2 --save div2
expect_rc div2 1
if grep -qE "^ember: error: training diverged at step [0-9]+ \(epoch [2-4]\): (the loss is (NaN|infinite)|the weights hold a NaN or an infinity after the update); the last finite loss was [0-9.e+]+ at step [0-9]+; the checkpoint in 'div2' \(step (8|16|24)\) is untouched\. Lower --lr \(2\), add --clip-grad-norm 1 or use --warmup-epochs$" div2.err; then ok; else
  fail "div2: $(tail -1 div2.err)"; fi
run div2-eval eval div2
expect_rc div2-eval 0
run div2-predict predict div2 idx/t10k-images-idx3-ubyte:0
expect_rc div2-predict 0
if grep -q "nan" div2-eval.out div2-predict.out; then fail "div2: NaN in eval/predict output"; else ok; fi

# ---- 11. evaluation: checked before training, halved on out of memory ---------------------------
EMBER_FAULT=oom-eval-above:8 run oom train "${common1[@]}" --epochs 1 --save oom
expect_rc oom 0
expect_line oom oom.err "ember train: evaluation ran out of memory with batch 32; retrying with batch 16"
expect_line oom oom.err "ember train: evaluation ran out of memory with batch 16; retrying with batch 8"
EMBER_FAULT=oom-eval-above:0 run oom0 train "${common1[@]}" --epochs 1 --save oom0 --metrics oom0.jsonl
expect_rc oom0 1
expect_line oom0 oom0.err "ember: error: CUDA out of memory (EMBER_FAULT=oom-eval-above:0) evaluating a batch of 1"
if ! grep -q '"event":"step"' oom0.jsonl 2>/dev/null; then ok; else fail "oom0: training started before the evaluation check"; fi
# eval DIR evaluates on the checkpoint's data.
run evaldir eval ref
expect_rc evaldir 0
expect_line evaldir evaldir.err "ember eval: --data idx (the checkpoint's)"
if grep -q "^accuracy [0-9.]*% (64 images)" evaldir.out; then ok; else fail "evaldir: $(head -1 evaldir.out)"; fi

# eval DIR of an ImageFolder run evaluates on that tree, not on Fashion-MNIST: on the images the
# run held out (--val-split 0.1 by default: 1 of the 12 of each class), not on its training images.
python3 "$here/make_data.py" folder folder 2
run folder train --data folder --image-size 8 --epochs 1 --batch-size 8 --optimizer adam --save folder-run
expect_rc folder 0
run folder-eval eval folder-run
expect_rc folder-eval 0
expect_line folder-eval folder-eval.err "ember eval: --data folder (the checkpoint's)"
expect_line folder-eval folder-eval.err "ember eval: the model's run held out 2 of the 24 images of folder (--val-split 0.1 --seed 1): evaluating on those"
if grep -q "^accuracy [0-9.]*% (2 images)" folder-eval.out; then ok; else fail "folder-eval: $(head -1 folder-eval.out)"; fi

# ---- 12. smaller things -------------------------------------------------------------------------
# Resuming a finished run says so and trains nothing.
cp -r ref done
run done train --resume done
expect_rc done 0
expect_line done done.err "ember train: the run in done is complete (step 16, 2 epochs); give --epochs above 2 to train it further"
# --momentum with Adam is harmless: a warning, not an error.
run mom train "${common[@]}" --max-steps 1 --momentum 0.5
expect_rc mom 0
expect_line mom mom.err "ember train: warning: --momentum applies to --optimizer sgd only; adam ignores it"
# --save-weights: what an interrupted write left is removed by the next run writing that file.
EMBER_FAULT=crash:atomic:before-rename run swcrash train "${common1[@]}" --epochs 1 --save-weights sw/w.safetensors
expect_rc swcrash 137
if ls -A sw | grep -q '^\.w\.safetensors\.tmp-'; then ok; else fail "swcrash: no temporary file to clean up"; fi
run swagain train "${common1[@]}" --epochs 1 --save-weights sw/w.safetensors
expect_rc swagain 0
if [ "$(ls -A sw)" = "w.safetensors" ]; then ok; else fail "swagain: sw holds $(ls -A sw)"; fi

finish

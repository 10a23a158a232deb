#!/usr/bin/env bash
# Hostile and odd inputs against the ember command: FIFOs, devices, sockets and links to /dev/zero
# in a data tree and in place of weights or manifests, huge and sparse files, crafted image and
# safetensors headers (quadratic, nested, oversized, NaN), crafted manifests, empty and
# overflowing option values, data changed under eval and resume, interrupts during evaluation,
# a file that goes bad mid-run, and names that hold terminal escape sequences. Every hostile
# file is answered within a second by exactly one error line that names the file and says what
# is wrong, in at most a second of processor time, with the process's peak memory under 256 MiB
# (Note [Reading untrusted files] in io/atomic_file.h; docs/data.md, "Limits"). EMBER_HOSTILE_TIMES=1
# prints each case's times.
#   tests/cli/hostile_inputs.sh path/to/ember
source "$(dirname "$0")/harness.sh" "$1"

# measure NAME ARGS...: runs ember as `run` does, setting $rc, $secs (wall time), $cpu (user +
# system time) and $rss (peak resident memory, KiB) of the process. A run that has not ended after
# 20 s is killed (rc 124): a hang fails the test instead of stalling it.
measure() {
  local name="$1"
  shift
  read -r rc secs cpu rss < <(python3 - "$name" "$ember" "$@" <<'PY'
import resource, subprocess, sys, time
name, cmd = sys.argv[1], sys.argv[2:]
with open(name + ".out", "wb") as out, open(name + ".err", "wb") as err:
    t0 = time.monotonic()
    p = subprocess.Popen(cmd, stdout=out, stderr=err)
    try:
        rc = p.wait(timeout=20)
    except subprocess.TimeoutExpired:
        p.kill()
        p.wait()
        rc = 124
    secs = time.monotonic() - t0
r = resource.getrusage(resource.RUSAGE_CHILDREN)
print(rc, f"{secs:.3f}", f"{r.ru_utime + r.ru_stime:.3f}", r.ru_maxrss)
PY
)
}
# bounded NAME: the run took at most 1 s of processor time and 256 MiB, and ended within 5 s of
# wall time (more than 1: CI runs two tests at once on two cores; a hang is what this catches).
bounded() {
  if python3 -c "import sys; sys.exit(0 if float(sys.argv[1]) <= 1.0 and float(sys.argv[2]) <= 5.0 and int(sys.argv[3]) <= 262144 else 1)" \
    "$cpu" "$secs" "$rss"; then
    ok
  else
    fail "$1: took $cpu s of processor time ($secs s wall) and $rss KiB (at most 1 s, 5 s and 262144 KiB)"
  fi
  [ -n "${EMBER_HOSTILE_TIMES:-}" ] && echo "  $1: $cpu s cpu, $secs s wall, $rss KiB"
  return 0
}
# hostile "exact error line" ARGS...: exit 1, exactly this one error line, within the bounds.
n_hostile=0
hostile() {
  local want="ember: error: $1"
  shift
  n_hostile=$((n_hostile + 1))
  local name="hostile$n_hostile"
  measure "$name" "$@"
  local errs
  errs="$(grep '^ember: error:' "$name.err")"
  if [ "$rc" -ne 1 ] || [ "$errs" != "$want" ]; then
    fail "ember $* -> exit $rc, stderr:"
    sed 's/^/    /' "$name.err" | head -5
    echo "  wanted exit 1 and: $want"
  else
    ok
  fi
  bounded "$name ($*)"
}
# no_escape NAME: neither NAME.out nor NAME.err holds a raw ESC or BEL byte.
no_escape() {
  if LC_ALL=C grep -q $'[\x1b\x07]' "$1.out" "$1.err"; then fail "$1: a control byte reached the terminal"; else ok; fi
}

python3 "$here/make_data.py" folder tree 2   # 2 classes of 12 PNGs, 16x16
python3 "$here/make_data.py" idx idx
tree_train=(--image-size 8 --epochs 1 --batch-size 8 --optimizer adam)
idx_train=(train --data idx --epochs 1 --batch-size 32 --max-steps 1)
run ref "${idx_train[@]}" --save ref --quiet   # a checkpoint to predict and evaluate with
expect_rc ref 0
# fresh NAME: a copy of the tree to plant one hostile file in.
fresh() { rm -rf "$1" && cp -r tree "$1"; }
not_regular="not a regular file; ember reads regular files only"

# ---- 1. files that are not regular in a data tree: refused unopened ---------------------------
# A FIFO's open() blocks until a writer comes: it hung inspect, train and bench loader, and with
# --workers even SIGTERM. Each command answers at once, naming the file.
fresh t-fifo
mkfifo t-fifo/class0/x.jpg
measure inspect-fifo inspect t-fifo
expect_rc inspect-fifo 0
expect_line inspect-fifo inspect-fifo.out "  t-fifo/class0/x.jpg: is a FIFO (named pipe), $not_regular"
bounded inspect-fifo
hostile "t-fifo/class0/x.jpg: is a FIFO (named pipe), $not_regular" train --data t-fifo "${tree_train[@]}"
hostile "t-fifo/class0/x.jpg: is a FIFO (named pipe), $not_regular" train --data t-fifo "${tree_train[@]}" --workers 2
hostile "t-fifo/class0/x.jpg: is a FIFO (named pipe), $not_regular" bench loader --root t-fifo --workers 2 --resize 8 --crop 8
# --skip-bad-images: left out and reported, as any unreadable file.
run fifo-skip train --data t-fifo "${tree_train[@]}" --workers 2 --skip-bad-images
expect_rc fifo-skip 0
expect_line fifo-skip fifo-skip.err "  t-fifo/class0/x.jpg: is a FIFO (named pipe), $not_regular"

# Devices: mknod where this user may (root in CI), else links to them (the same check).
fresh t-dev
fresh t-blk
if mknod t-dev/class1/null.png c 1 3 2>/dev/null && mknod t-blk/class1/loop.png b 7 0 2>/dev/null; then
  echo "devices made with mknod"
else
  echo "note: mknod is not permitted here; the device cases use symlinks to /dev/null and /dev/loop0"
  rm -f t-dev/class1/null.png t-blk/class1/loop.png
  ln -s /dev/null t-dev/class1/null.png
  ln -s /dev/loop0 t-blk/class1/loop.png
fi
hostile "t-dev/class1/null.png: is a character device, $not_regular" train --data t-dev "${tree_train[@]}"
if [ -b t-blk/class1/loop.png ]; then
  hostile "t-blk/class1/loop.png: is a block device, $not_regular" train --data t-blk "${tree_train[@]}"
else
  echo "note: no block device to link to (/dev/loop0 is missing): the block device case is left out"
fi
fresh t-zero
ln -s /dev/zero t-zero/class0/zero.png
hostile "t-zero/class0/zero.png: is a character device, $not_regular" train --data t-zero "${tree_train[@]}"
hostile "t-zero/class0/zero.png: is a character device, $not_regular" predict ref t-zero/class0/zero.png
fresh t-sock
python3 -c "import socket, sys; socket.socket(socket.AF_UNIX).bind(sys.argv[1])" t-sock/class1/s.png
hostile "t-sock/class1/s.png: is a socket, $not_regular" train --data t-sock "${tree_train[@]}" --workers 1

# ---- 2. images: size caps and headers checked before the body ------------------------------------
fresh t-huge
truncate -s 3G t-huge/class0/huge.jpg   # sparse: nothing is written, and nothing may be read
hostile "t-huge/class0/huge.jpg: 3221225472 bytes is more than the limit of 1073741824 bytes for an image file: the file is not an image, or damaged" \
  train --data t-huge "${tree_train[@]}"
# 500 MiB that are no image; PNG headers that ask for too much: refused by their first bytes.
fresh t-head
python3 - <<'PY'
import struct, zlib
def png_header(w, h):
    ihdr = struct.pack(">IIBBBBB", w, h, 8, 2, 0, 0, 0)
    return b"\x89PNG\r\n\x1a\n" + struct.pack(">I", 13) + b"IHDR" + ihdr + struct.pack(">I", zlib.crc32(b"IHDR" + ihdr))
for name, head in [("text.png", b"hello, not an image"), ("wide.png", png_header(40000, 40000)),
                   ("bomb.png", png_header(20000, 20000))]:
    with open("t-head/class1/" + name, "wb") as f:
        f.write(head)
        f.truncate(500 << 20)
PY
measure inspect-head inspect t-head
expect_line inspect-head inspect-head.out "  t-head/class1/text.png: unsupported or unrecognized image format (supported: JPEG, PNG, BMP, GIF, PPM/PGM, TGA, WebP, TIFF)"
expect_line inspect-head inspect-head.out "  t-head/class1/wide.png: PNG image of 40000x40000 has a side longer than the limit of 32768 pixels"
expect_line inspect-head inspect-head.out "  t-head/class1/bomb.png: PNG image of 20000x20000 is larger than the limit of 268435456 pixels"
bounded inspect-head
rm t-head/class1/text.png t-head/class1/wide.png
hostile "t-head/class1/bomb.png: PNG image of 20000x20000 is larger than the limit of 268435456 pixels" \
  train --data t-head "${tree_train[@]}"
hostile "t-head/class1/bomb.png: PNG image of 20000x20000 is larger than the limit of 268435456 pixels" \
  predict ref t-head/class1/bomb.png

# ---- 3. weights files ----------------------------------------------------------------------------
python3 - <<'PY'
import json, os, struct
def st(name, header, data=b"", length=None):
    text = header if isinstance(header, bytes) else json.dumps(header, separators=(",", ":")).encode()
    with open(name, "wb") as f:
        f.write(struct.pack("<Q", len(text) if length is None else length) + text + data)
st("st-length.safetensors", b"{}", length=1 << 63)
# 120,000 entries: the quadratic parser took minutes; the message names a few of them.
entries = ",".join('"t%d":{"dtype":"F32","shape":[0],"data_offsets":[0,0]}' % i for i in range(120000))
st("st-many.safetensors", ("{" + entries + "}").encode())
st("st-deep.safetensors", b'{"a":' + b"[" * 200000 + b"]" * 200000 + b"}")
st("st-dup.safetensors", b'{"a":{"dtype":"F32","shape":[0],"data_offsets":[0,0]},"a":{"dtype":"F32","shape":[0],"data_offsets":[0,0]}}')
st("st-nan.safetensors", {"x": {"dtype": "F32", "shape": [1], "data_offsets": [0, 4]}}, struct.pack("<f", float("nan")))
# A tensor of 1 TiB in a sparse file: more than any CI machine's memory, refused before allocating.
st("st-huge.safetensors", {"x": {"dtype": "F32", "shape": [1 << 38], "data_offsets": [0, 1 << 40]}})
with open("st-huge.safetensors", "r+b") as f:
    f.truncate(os.path.getsize("st-huge.safetensors") + (1 << 40))
PY
mkfifo st-fifo.safetensors
ln -s /dev/zero st-zero.safetensors
hostile "st-fifo.safetensors: is a FIFO (named pipe), $not_regular" "${idx_train[@]}" --init-weights st-fifo.safetensors
hostile "st-zero.safetensors: is a character device, $not_regular" "${idx_train[@]}" --init-weights st-zero.safetensors
hostile "st-zero.safetensors: is a character device, $not_regular" eval st-zero.safetensors --data idx
hostile "st-length.safetensors: header length 9223372036854775808 is over the 100000000-byte limit: the file is garbled or not safetensors" \
  "${idx_train[@]}" --init-weights st-length.safetensors
hostile "st-deep.safetensors: 'a': a value nested 3 levels deep (the format has 2)" eval st-deep.safetensors --data idx
hostile "st-dup.safetensors: header names 'a' more than once" predict st-dup.safetensors idx/t10k-images-idx3-ubyte:0
hostile "st-nan.safetensors: tensor 'x' holds 1 NaN or infinite value (the first at element 0 of 1): a model with these weights gives NaN for every input; refusing to use it" \
  "${idx_train[@]}" --init-weights st-nan.safetensors
measure st-huge eval st-huge.safetensors --data idx
if [ "$rc" -eq 1 ] && grep -qE "^ember: error: st-huge.safetensors: its tensors hold 1099511627776 bytes, more than this machine's memory \([0-9]+ bytes\)$" st-huge.err; then
  ok
else
  fail "st-huge: exit $rc, $(cat st-huge.err)"
fi
bounded st-huge
measure st-many "${idx_train[@]}" --init-weights st-many.safetensors
if [ "$rc" -eq 1 ] && grep -qE "^ember: error: st-many.safetensors: the tensors do not match the model [A-Za-z]+: missing keys: .*; unexpected keys: t0, t1, t10, t100, t1000, t10000 and 119994 more$" st-many.err; then
  ok
else
  fail "st-many: exit $rc, $(head -c 600 st-many.err)"
fi
bounded st-many

# ---- 4. checkpoint manifests ---------------------------------------------------------------------
for kind in fifo zero big escape; do
  cp -r ref "m-$kind"
  rm "m-$kind/checkpoint.json"
done
mkfifo m-fifo/checkpoint.json
ln -s /dev/zero m-zero/checkpoint.json
python3 - <<'PY'
import json
m = json.load(open("ref/checkpoint.json"))
with open("m-big/checkpoint.json", "w") as f:
    f.write(json.dumps(m) + " " * (5 << 20))
m["weights"]["path"] = "../../etc/passwd"
json.dump(m, open("m-escape/checkpoint.json", "w"))
PY
hostile "m-fifo/checkpoint.json: is a FIFO (named pipe), $not_regular" eval m-fifo
hostile "m-fifo/checkpoint.json: is a FIFO (named pipe), $not_regular" train --resume m-fifo
hostile "m-zero/checkpoint.json: is a character device, $not_regular" predict m-zero idx/t10k-images-idx3-ubyte:0
hostile "m-big/checkpoint.json: $(stat -c %s m-big/checkpoint.json) bytes is more than the 1048576-byte limit for a checkpoint manifest (docs/data.md, \"Limits\"): the file is not what its name says, or damaged" \
  eval m-big
hostile "m-escape/checkpoint.json: names the weights file '../../etc/passwd', which is not step-<N>/model.safetensors inside the checkpoint directory" eval m-escape

# ---- 5. option values ----------------------------------------------------------------------------
expect_error "--resume: the value is empty (give one, or leave the option out)" train --resume ""
expect_error "--momentum: the value is empty (give one, or leave the option out)" train --momentum ""
expect_error "--data: the value is empty (give one, or leave the option out)" eval ref --data ""
expect_error "path: the value is empty (give one, or leave the option out)" inspect ""
expect_error "--max-steps: '99999999999999999999' is out of range" train --max-steps 99999999999999999999
expect_error "--epochs: '4294967296' is out of range" train --epochs 4294967296
expect_error "--seed: '18446744073709551616' is out of range" train --seed 18446744073709551616
expect_error "--epochs: '0x10' is not an integer (decimal digits)" train --epochs 0x10
expect_error "--batch-size: '1e3' is not an integer" eval ref --batch-size 1e3
for index in 1.5 1e3 -1 0x10 " 7" 99999999999999999999; do
  expect_error "predict: '$index' in 'idx/t10k-images-idx3-ubyte:$index' is not an image index (a non-negative decimal integer)" \
    predict ref "idx/t10k-images-idx3-ubyte:$index"
done

# ---- 6. eval evaluates what was held out; resume on changed data says what changed -------------
fresh t-split
run split train --data t-split "${tree_train[@]}" --val-split 0.25 --save split-run --quiet
expect_rc split 0
run split-eval eval split-run
expect_line split-eval split-eval.err "ember eval: the model's run held out 6 of the 24 images of t-split (--val-split 0.25 --seed 1): evaluating on those"
if grep -q "^accuracy [0-9.]*% (6 images)" split-eval.out; then ok; else fail "split-eval: $(head -1 split-eval.out)"; fi
cp t-split/class0/0.png t-split/class0/new.png
expect_error "eval: 't-split' is the tree the model's run split with --val-split 0.25 --seed 1, but it has changed since (25 images now, 24 then): its held-out images can no longer be told apart from the training images. Evaluate on a separate tree with --data, or train again" \
  eval split-run
expect_error "--resume: the data in 't-split' changed since the run was saved: 25 images now, 24 then; a resumed run needs the data it started with (start a new run, e.g. with --init-weights from the checkpoint's weights)" \
  train --resume split-run --epochs 2
rm t-split/class0/new.png
mkdir t-split/class2 && mv t-split/class1/0.png t-split/class2/
expect_error "--resume: the data in 't-split' changed since the run was saved: 3 classes now, 2 then; new: 'class2'; a resumed run needs the data it started with (start a new run, e.g. with --init-weights from the checkpoint's weights)" \
  train --resume split-run --epochs 2

# ---- 7. smaller things ---------------------------------------------------------------------------
# --max-steps at or below the checkpoint's step trains nothing.
run maxsteps train --resume ref --max-steps 1 --epochs 2
expect_rc maxsteps 0
expect_line maxsteps maxsteps.err "ember train: the run in ref is at step 1, and --max-steps 1 counts from the run's start: nothing to train (give --max-steps above 1 to train further)"
if [ "$(python3 -c "import json; print(json.load(open('ref/checkpoint.json'))['step'])")" = 1 ]; then ok; else fail "maxsteps: trained"; fi

# SIGINT during an evaluation stops it at its next batch (the epoch's checkpoint is saved first);
# SIGHUP during training stops as SIGINT does.
common=(--data idx --batch-size 32 --optimizer adam --epochs 2)
EMBER_FAULT=slow-eval-ms:400 "$ember" train "${common[@]}" --save int-eval --metrics int-eval.jsonl >int-eval.out 2>int-eval.err &
pid=$!
while [ "$(steps_in int-eval.jsonl)" -lt 8 ] && kill -0 $pid 2>/dev/null; do sleep 0.02; done
sleep 0.2
kill -INT $pid
wait $pid
rc=$?
expect_rc int-eval 130
expect_line int-eval int-eval.err "ember train: interrupted at step 8 (epoch 1 of 2); checkpoint saved in int-eval; continue with: ember train --resume int-eval"
if [ ! -e int-eval/evaluation.json ]; then ok; else fail "int-eval: the interrupted evaluation was written"; fi
EMBER_FAULT=slow-step-ms:100 "$ember" train "${common[@]}" --save "my run;x" --metrics hup.jsonl >hup.out 2>hup.err &
pid=$!
while [ "$(steps_in hup.jsonl)" -lt 2 ] && kill -0 $pid 2>/dev/null; do sleep 0.02; done
kill -HUP $pid
wait $pid
rc=$?
expect_rc hup 130
# The printed command is shell-quoted, and runs.
if grep -qE "^ember train: interrupted at step [0-9]+ \(epoch 1 of 2\); checkpoint saved in my run;x; continue with: ember train --resume 'my run;x'$" hup.err; then ok; else
  fail "hup: $(tail -1 hup.err)"; fi
command="$(sed -n "s/.*continue with: ember //p" hup.err)"
eval "set -- $command"
run hup-resume "$@" --max-steps 9
expect_rc hup-resume 0

# A file that goes bad mid-run: the steps since the last checkpoint are saved first.
fresh t-bad
cp -r t-bad t-bad.good
EMBER_FAULT=slow-step-ms:200 "$ember" train --data t-bad --image-size 8 --batch-size 4 --epochs 2 --optimizer adam --save bad-run \
  --metrics bad.jsonl >bad.out 2>bad.err &
pid=$!
while [ "$(steps_in bad.jsonl)" -lt 2 ] && kill -0 $pid 2>/dev/null; do sleep 0.02; done
for f in t-bad/class*/*.png; do echo garbage >"$f"; done
wait $pid
rc=$?
expect_rc bad 1
saved="$(python3 -c "import json; print(json.load(open('bad-run/checkpoint.json'))['step'])" 2>/dev/null)"
if grep -qE "^ember: error: t-bad/class[01]/[0-9]+\.png: unsupported or unrecognized image format \(supported: [^)]*\); the run's $saved step\(s\) since its last checkpoint are saved in 'bad-run' \(step $saved\): make the file readable again, then continue with: ember train --resume bad-run$" bad.err &&
  [ "$saved" -ge 2 ]; then ok; else fail "bad: checkpoint step '$saved', $(tail -1 bad.err)"; fi
rm -rf t-bad && mv t-bad.good t-bad
run bad-resume train --resume bad-run
expect_rc bad-resume 0

# Names with escape sequences reach the terminal as text.
fresh t-esc
mv t-esc/class1 t-esc/$'evil\e]0;owned\a'
mkfifo t-esc/class0/$'x\e[2J.png'
run esc-inspect inspect t-esc
expect_line esc-inspect esc-inspect.out '     1  evil\e]0;owned\x07             12'
expect_line esc-inspect esc-inspect.out "  t-esc/class0/x\\e[2J.png: is a FIFO (named pipe), $not_regular"
no_escape esc-inspect
run esc-train train --data t-esc "${tree_train[@]}"
expect_line esc-train esc-train.err "ember: error: t-esc/class0/x\\e[2J.png: is a FIFO (named pipe), $not_regular"
no_escape esc-train

finish

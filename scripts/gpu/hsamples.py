#!/usr/bin/env python3
"""Where a process's host time went, from ktrace's host samples.

ktrace.c (KTRACE_SAMPLES=FILE) writes one line a sample of a thread's CPU
time: its program counter and the C call stack above it, with FILE.maps,
the process's mappings. This resolves each address to a function through
the symbol tables of local copies of the same binaries (the carried ones
are stripped: --lib names the unstripped copy of a mapped file by its base
name) and reports, over a window of the run:

- the samples by thread;
- self: the function each sample stood in;
- inclusive: each function a sample's stack passed through (a sample
  counts once a function however deep it recurses);
- self by library.

A sample stands for its weight in periods of its thread's CPU time
(KTRACE_SAMPLE_US); the figures are weights.
An address in a file with no symbols (the device's driver) is named by its
file; one in a file with only exported symbols (a stripped system library)
by the nearest exported function before it, marked ~, which may not be the
function it is in.

  hsamples.py samples.txt --lib libmlx.so=site/mlx/lib/libmlx.so \\
      --lib llama.test=llama.test --window 1.2:0.2
"""
import argparse
import bisect
import collections
import os
import struct
import subprocess
import sys


def read_maps(path):
    maps = []
    with open(path) as f:
        for line in f:
            parts = line.split(None, 5)
            if len(parts) < 6 or "x" not in parts[1]:
                continue
            lo, hi = (int(v, 16) for v in parts[0].split("-"))
            maps.append((lo, hi, int(parts[2], 16), parts[5].strip()))
    maps.sort()
    return maps


class Elf:
    """A local ELF file's loadable segments and function symbols."""

    def __init__(self, path):
        self.path = path
        with open(path, "rb") as f:
            head = f.read(64)
            if head[:4] != b"\x7fELF" or head[4] != 2:
                raise ValueError(f"{path}: not a 64-bit ELF file")
            self.type, = struct.unpack_from("<H", head, 16)
            phoff, = struct.unpack_from("<Q", head, 32)
            phentsize, phnum = struct.unpack_from("<HH", head, 54)
            f.seek(phoff)
            table = f.read(phentsize * phnum)
        self.loads = []
        for i in range(phnum):
            kind, _, offset, vaddr, _, filesz, _, _ = struct.unpack_from("<IIQQQQQQ", table, i * phentsize)
            if kind == 1:
                self.loads.append((offset, vaddr, filesz))
        self.addrs, self.names = [], []
        # A file without its symbol table (a system library) names an
        # address by the nearest exported function before it, marked ~.
        for flag, mark in ((["--defined-only"], ""), (["--defined-only", "-D"], "~")):
            out = subprocess.run(["nm", "-C", *flag, path], capture_output=True, text=True).stdout
            syms = []
            for line in out.splitlines():
                parts = line.split(" ", 2)
                if len(parts) == 3 and parts[1] in "tTwWiu" and parts[0]:
                    syms.append((int(parts[0], 16), mark + parts[2]))
            if syms:
                syms.sort()
                self.addrs = [a for a, _ in syms]
                self.names = [n for _, n in syms]
                break

    def vaddr(self, offset):
        for off, va, size in self.loads:
            if off <= offset < off + size:
                return offset - off + va
        return None

    def name(self, vaddr):
        i = bisect.bisect_right(self.addrs, vaddr) - 1
        return self.names[i] if i >= 0 else None


class Resolver:
    def __init__(self, maps, libs):
        self.maps = maps
        self.starts = [m[0] for m in maps]
        self.libs = libs
        self.elves = {}
        self.cache = {}

    def elf(self, path):
        if path not in self.elves:
            local = self.libs.get(os.path.basename(path), path)
            try:
                self.elves[path] = Elf(local)
            except (OSError, ValueError):
                self.elves[path] = None
        return self.elves[path]

    def __call__(self, addr):
        """(function, file base name) of a code address."""
        if addr in self.cache:
            return self.cache[addr]
        i = bisect.bisect_right(self.starts, addr) - 1
        if i < 0 or addr >= self.maps[i][1]:
            got = (f"?{addr:x}", "?")
        else:
            lo, _, offset, path = self.maps[i]
            base = os.path.basename(path)
            elf = self.elf(path)
            name = None
            if elf is not None:
                va = addr if elf.type == 2 else elf.vaddr(addr - lo + offset)
                name = elf.name(va) if va is not None else None
            got = (name or f"[{base}]", base)
        self.cache[addr] = got
        return got


def read_samples(path):
    samples, lost = [], 0
    with open(path) as f:
        for line in f:
            parts = line.split()
            if parts[:2] == ["E", "lost"]:
                lost += int(parts[2])
                continue
            if len(parts) < 6 or parts[0] != "S":
                continue
            ns, tid, weight, pc, n = int(parts[1], 16), int(parts[2]), int(parts[3]), int(parts[4], 16), int(parts[5])
            frames = [int(v, 16) for v in parts[6:6 + n]]
            # The stack from the interrupted instruction up: the frames
            # below it are the signal handler's own.
            stack = [pc] + [a - 1 for a in frames[frames.index(pc) + 1:]] if pc in frames else [pc]
            samples.append((ns, tid, weight, stack))
    return samples, lost


def short(name, width):
    return name if len(name) <= width else name[: width - 3] + "..."


def table(title, counts, total, top, width):
    print(f"\n{title}")
    for key, c in counts.most_common(top):
        print(f"  {100 * c / total:6.2f}%  {c:7d}  {short(key, width)}")


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("samples")
    ap.add_argument("--maps", help="the mappings (default SAMPLES.maps)")
    ap.add_argument("--lib", action="append", default=[], metavar="NAME=PATH",
                    help="the local, unstripped copy of the mapped file named NAME")
    ap.add_argument("--window", default="", metavar="FROM:TO",
                    help="only samples from FROM to TO seconds before the last sample (default all)")
    ap.add_argument("--thread", type=int, help="only this thread's samples")
    ap.add_argument("--top", type=int, default=30)
    ap.add_argument("--width", type=int, default=150)
    args = ap.parse_args()
    libs = dict(v.split("=", 1) for v in args.lib)
    samples, lost = read_samples(args.samples)
    if not samples:
        sys.exit(f"{args.samples}: no samples")
    resolve = Resolver(read_maps(args.maps or args.samples + ".maps"), libs)
    last = max(s[0] for s in samples)
    if args.window:
        lo, hi = (float(v) for v in args.window.split(":"))
        samples = [s for s in samples if last - lo * 1e9 <= s[0] <= last - hi * 1e9]
    if args.thread is not None:
        samples = [s for s in samples if s[1] == args.thread]
    if not samples:
        sys.exit("no samples in the window")
    total = sum(s[2] for s in samples)
    span = (max(s[0] for s in samples) - min(s[0] for s in samples)) / 1e9
    print(f"{len(samples)} samples, weight {total}, over {span:.2f} s{f' ({lost} lost)' if lost else ''}")
    threads, self_fn, self_lib, incl = (collections.Counter() for _ in range(4))
    for _, tid, weight, stack in samples:
        fn, lib = resolve(stack[0])
        threads[str(tid)] += weight
        self_fn[f"{fn}  [{lib}]"] += weight
        self_lib[lib] += weight
        for name in {resolve(a)[0] for a in stack}:
            incl[name] += weight
    table("by thread", threads, total, 8, args.width)
    table("self, by function", self_fn, total, args.top, args.width)
    table("inclusive, by function", incl, total, args.top, args.width)
    table("self, by file", self_lib, total, 12, args.width)


if __name__ == "__main__":
    main()

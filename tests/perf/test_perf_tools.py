#!/usr/bin/env python3
"""End-to-end tests of the sn_*_perf tools: output format (nccl-tests 2.19.6, checked line by
line and column by column), exit codes, -J JSON against the printed table and the
bandwidth factors, and the launch modes (threads, RANK/WORLD_SIZE processes, mpirun).

Usage: test_perf_tools.py --bindir DIR --launcher perf/launch_local.sh [--mpirun PATH] CASE
Exit 0 on success, 77 when the case cannot run here (ctest reports it as skipped), 1 on
failure. No timing thresholds: only generous hang limits.
"""
import argparse
import json
import os
import re
import signal
import subprocess
import sys
import tempfile
import time

COLLS = ["allreduce", "allgather", "reducescatter", "broadcast", "reduce",
         "alltoall", "gather", "scatter", "sendrecv", "hypercube"]
ROOTED = {"broadcast", "reduce", "gather", "scatter"}
REDUCES = {"allreduce", "reducescatter", "reduce"}
# size column = count x type size x this; algbw bytes = count x type size x ALG; busbw = algbw x BUS
SIZE_MUL = {"allreduce": lambda n: 1, "allgather": lambda n: n, "reducescatter": lambda n: n,
            "broadcast": lambda n: 1, "reduce": lambda n: 1, "alltoall": lambda n: n,
            "gather": lambda n: n, "scatter": lambda n: n, "sendrecv": lambda n: 1,
            "hypercube": lambda n: n}
ALG = {"allreduce": lambda n: 1, "allgather": lambda n: n, "reducescatter": lambda n: n,
       "broadcast": lambda n: 1, "reduce": lambda n: 1, "alltoall": lambda n: n,
       "gather": lambda n: n, "scatter": lambda n: n, "sendrecv": lambda n: 1,
       "hypercube": lambda n: n - 1}
BUS = {"allreduce": lambda n: 2 * (n - 1) / n, "allgather": lambda n: (n - 1) / n,
       "reducescatter": lambda n: (n - 1) / n, "broadcast": lambda n: 1, "reduce": lambda n: 1,
       "alltoall": lambda n: (n - 1) / n, "gather": lambda n: (n - 1) / n,
       "scatter": lambda n: (n - 1) / n, "sendrecv": lambda n: 1, "hypercube": lambda n: 1}
TYPE_SIZE = {"int8": 1, "uint8": 1, "int32": 4, "uint32": 4, "int64": 8, "uint64": 8, "half": 2,
             "float": 4, "double": 8, "bfloat16": 2, "f8e4m3": 1, "f8e5m2": 1}
# nccl-tests 2.19.6's table header, verbatim.
TABLE_HEADER = [
    "#                                                              out-of-place                       in-place",
    "#       size         count      type   redop    root     time   algbw   busbw #wrong     time   algbw   busbw #wrong",
    "#        (B)    (elements)                               (us)  (GB/s)  (GB/s)            (us)  (GB/s)  (GB/s)",
]
SMALL = ["-b", "8", "-e", "64K", "-f", "8", "-n", "2", "-w", "1"]
HANG_LIMIT = 300


class Failure(Exception):
    pass


def expect(cond, msg, text=""):
    if not cond:
        raise Failure(msg + ("\n--- output ---\n" + text if text else ""))


def run(args, env=None, timeout=HANG_LIMIT):
    e = dict(os.environ)
    e.update(env or {})
    p = subprocess.run(args, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=e, timeout=timeout, text=True)
    return p.returncode, p.stdout, p.stderr


def parse_row(line, text):
    f = line.split()
    expect(len(f) == 13, "row does not have 13 columns: %r" % line, text)
    layout = "%12s  %12s  %8s  %6s  %6s" % tuple(f[:5])
    for h in (0, 1):
        layout += "  %7s  %6s  %6s  %5s" % tuple(f[5 + 4 * h:9 + 4 * h])
    expect(layout == line, "row columns are not at nccl-tests' widths:\n%r\n%r" % (line, layout), text)
    row = {"size": int(f[0]), "count": int(f[1]), "type": f[2], "redop": f[3], "root": int(f[4]), "half": []}
    for h in (0, 1):
        t, a, b, w = f[5 + 4 * h:9 + 4 * h]
        tv = float(t)
        expect(tv > 0 and float(a) >= 0 and float(b) >= 0, "bad numbers in %r" % line, text)
        if "e" not in t:  # time: %.2f below 100 us, %.1f below 10 ms, %.0f above
            want = {2 if tv < 100 else (1 if tv < 10000 else 0)}
            # Like nccl-tests, the format is chosen before rounding: 99.996 prints "100.00"
            # and 9999.96 prints "10000.0".
            if tv == 100:
                want.add(2)
            if tv == 10000:
                want.add(1)
            decimals = len(t.split(".")[1]) if "." in t else 0
            expect(decimals in want, "time %r is not printed like nccl-tests" % t, text)
        row["half"].append({"time": tv, "algbw": float(a), "busbw": float(b), "wrong": None if w == "N/A" else int(w)})
    return row


def check_output(text, prog, nranks, coll, nthreads=None, ngpus=None, check=True, ok=True, pids=None, cputime=False):
    """Checks every line of a tool's stdout; returns (rows, average busbw)."""
    lines = text.split("\n")
    expect(lines[-1] == "", "output does not end with a newline", text)
    lines = lines[:-1]
    expect(lines[0] == "# nccl-tests version 2.19.6 nccl-headers=22809 nccl-library=22809", "version line", text)
    expect(lines[1] == "# Collective test starting: " + prog, "starting line", text)
    m = re.fullmatch(r"# nThread (\d+) nGpus (\d+) minBytes \d+ maxBytes \d+ step: \d+\((factor|bytes)\) "
                     r"warmup iters: \d+ iters: \d+ agg iters: \d+ validation: (\d+) graph: 0 unalign: \d+", lines[2])
    expect(m is not None, "nThread line", text)
    if nthreads is not None:
        expect(int(m.group(1)) == nthreads and int(m.group(2)) == ngpus, "nThread/nGpus values", text)
    expect(lines[3] == "#" and lines[4] == "# Using devices", "devices heading", text)
    seen_pids = set()
    for r in range(nranks):
        d = re.fullmatch(r"#  Rank +(\d+) Group +0 Pid +(\d+) on +\S+ device +\d+ \[0000:00:00\] host memory \(CPU\)",
                         lines[5 + r])
        expect(d is not None and int(d.group(1)) == r, "device line of rank %d" % r, text)
        seen_pids.add(d.group(2))
    if pids is not None:
        expect(len(seen_pids) == pids, "expected %d distinct pids in the device lines" % pids, text)
    i = 5 + nranks
    header = list(TABLE_HEADER)
    if cputime:
        header[1] = header[1].replace("    time", " cputime")
    expect(lines[i] == "#" and lines[i + 1:i + 4] == header, "table header", text)
    i += 4
    rows = []
    while i < len(lines) and not lines[i].startswith("# Out of bounds values"):
        if not lines[i].startswith("#  per call (us)"):  # -I 1 follows each row with one
            rows.append(parse_row(lines[i], text))
        i += 1
    expect(len(rows) > 0, "no rows", text)
    expect(i + 4 == len(lines), "footer is not the last four lines", text)
    oob = re.fullmatch(r"# Out of bounds values : (\d+) (OK|FAILED)", lines[i])
    expect(oob is not None, "out-of-bounds line", text)
    avg = re.fullmatch(r"# Avg bus bandwidth    : (\S+) (|OK|FAILED)", lines[i + 1])
    expect(avg is not None, "average line (with its trailing space)", text)
    expect(lines[i + 2] == "#" and lines[i + 3] == "# Collective test concluded: " + prog, "concluded line", text)
    for row in rows:
        expect(row["type"] in TYPE_SIZE, "type column", text)
        expect(row["redop"] == "none" if coll not in REDUCES else row["redop"] != "none", "redop column", text)
        expect((row["root"] >= 0) == (coll in ROOTED), "root column", text)
        expect(row["size"] == row["count"] * TYPE_SIZE[row["type"]] * SIZE_MUL[coll](nranks), "size column", text)
        for h in row["half"]:
            expect((h["wrong"] is None) == (not check), "#wrong column N/A iff -c 0", text)
            if ok and check:
                expect(h["wrong"] == 0, "wrong elements", text)
    if ok:
        expect(oob.group(1) == "0" and oob.group(2) == "OK", "out of bounds", text)
    return rows, float(avg.group(1))


def check_json(path, rows, coll, nranks):
    with open(path) as f:
        doc = json.load(f)
    for key in ("config", "devices", "results", "out_of_bounds", "average_bus_bandwidth"):
        expect(key in doc, "JSON lacks " + key)
    expect(len(doc["devices"]) == nranks, "JSON devices")
    expect(len(doc["results"]) == len(rows), "JSON results vs printed rows")
    for row, res in zip(rows, doc["results"]):
        for k in ("size", "count", "type", "redop", "root"):
            expect(res[k] == row[k], "JSON %s differs from the table: %r vs %r" % (k, res[k], row[k]))
        for h, name in ((0, "out_of_place"), (1, "in_place")):
            j = res[name]
            expect(abs(j["time"] - row["half"][h]["time"]) <= 0.051 + 1e-3 * j["time"], "JSON time vs table")
            alg_bytes = res["count"] * TYPE_SIZE[res["type"]] * ALG[coll](nranks)
            expect(abs(j["alg_bw"] - alg_bytes / (j["time"] * 1e3)) <= 1e-6 * max(j["alg_bw"], 1e-9),
                   "algbw is not count x size x factor / time (%s)" % coll)
            expect(abs(j["bus_bw"] - j["alg_bw"] * BUS[coll](nranks)) <= 1e-6 * max(j["bus_bw"], 1e-9),
                   "busbw factor (%s)" % coll)
    return doc


def tool(bindir, coll, mpi=False):
    return os.path.join(bindir, "sn_%s_perf%s" % (coll, "_mpi" if mpi else ""))


def case_format(a):
    """Every tool on 1-3 thread ranks (hypercube: 1, 2, 4), table and JSON checked."""
    with tempfile.TemporaryDirectory() as tmp:
        for coll in COLLS:
            for n in ([1, 2, 4] if coll == "hypercube" else [1, 2, 3]):
                js = os.path.join(tmp, "%s%d.json" % (coll, n))
                extra = ["-r", "all"] if coll in ROOTED else []
                rc, out, err = run([tool(a.bindir, coll)] + SMALL + ["-t", str(n), "-J", js] + extra)
                expect(rc == 0, "%s on %d ranks exited %d: %s" % (coll, n, rc, err), out)
                rows, _ = check_output(out, "sn_%s_perf" % coll, n, coll, nthreads=n, ngpus=1)
                roots = n if coll in ROOTED else 1
                expect(len(rows) == 5 * roots, "one row per size (and root)", out)
                doc = check_json(js, rows, coll, n)
                expect(doc["out_of_bounds"]["okay"] is True, "JSON out_of_bounds.okay")
                print("ok %-13s %d ranks, %d rows" % (coll, n, len(rows)))


def case_groups(a):
    """Several ranks per thread (-g), issued inside ncclGroupStart/End."""
    for coll, t, g in (("allreduce", 1, 2), ("allreduce", 1, 3), ("alltoall", 2, 2), ("sendrecv", 1, 3),
                       ("hypercube", 2, 2), ("reducescatter", 3, 1), ("gather", 1, 2)):
        extra = ["-r", "1"] if coll in ROOTED else []
        rc, out, err = run([tool(a.bindir, coll)] + SMALL + ["-t", str(t), "-g", str(g)] + extra)
        expect(rc == 0, "%s -t %d -g %d exited %d: %s" % (coll, t, g, rc, err), out)
        check_output(out, "sn_%s_perf" % coll, t * g, coll, nthreads=t, ngpus=g)
        print("ok %s -t %d -g %d" % (coll, t, g))


def case_types(a):
    """Every datatype and operator validates exactly (avg within 2 ulp) on 3 ranks."""
    for coll in ("allreduce", "reducescatter", "reduce", "allgather", "broadcast"):
        rc, out, err = run([tool(a.bindir, coll), "-b", "8", "-e", "4K", "-f", "8", "-n", "1", "-t", "3",
                            "-d", "all", "-o", "all"])
        expect(rc == 0, "%s -d all -o all exited %d: %s" % (coll, rc, err), out)
        rows, _ = check_output(out, "sn_%s_perf" % coll, 3, coll)
        combos = {(r["type"], r["redop"]) for r in rows}
        expect(len(combos) == 12 * (6 if coll in REDUCES else 1), "every type x op appears", out)
        print("ok %s: %d rows over %d type/op pairs" % (coll, len(rows), len(combos)))


def case_inject(a):
    """Corrupted output (SNCCL_PERF_INJECT_WRONG) is counted across ranks and exits 7."""
    env = {"SNCCL_PERF_INJECT_WRONG": "1"}
    for coll, n, per_half in (("allreduce", 3, 3), ("gather", 3, 1), ("alltoall", 2, 2)):
        rc, out, err = run([tool(a.bindir, coll)] + SMALL + ["-t", str(n)], env=env)
        expect(rc == 7, "%s with corrupted data exited %d, not 7" % (coll, rc), out + err)
        rows, _ = check_output(out, "sn_%s_perf" % coll, n, coll, ok=False)
        for row in rows:
            if row["count"] > 0:
                for h in row["half"]:
                    expect(h["wrong"] == per_half, "#wrong %r, expected %d (one per rank with output)"
                           % (h["wrong"], per_half), out)
        expect("# Out of bounds values : %d FAILED" % (2 * sum(r["count"] > 0 for r in rows)) in out,
               "out-of-bounds count", out)
        print("ok %s: corruption detected, exit 7" % coll)
    rc, out, err = run([tool(a.bindir, "allreduce")] + SMALL + ["-t", "2", "-c", "0"], env=env)
    expect(rc == 0, "-c 0 does not validate, so it exits 0", out + err)
    check_output(out, "sn_allreduce_perf", 2, "allreduce", check=False)
    print("ok -c 0 prints N/A")


def case_options(a):
    """Flags beyond the basics, usage errors, NCCL_TESTS_MIN_BW, progress lines."""
    ar = tool(a.bindir, "allreduce")
    rc, out, err = run([ar, "-b", "1K", "-e", "3K", "-i", "1K", "-n", "1", "-t", "2"])
    expect(rc == 0 and "minBytes 1024 maxBytes 3072 step: 1024(bytes)" in out, "additive steps", out + err)
    rows, _ = check_output(out, "sn_allreduce_perf", 2, "allreduce")
    expect([r["size"] for r in rows] == [1024, 2048, 3072], "sizes of -i steps", out)
    for flags in (["-C", "1"], ["-a", "0"], ["-a", "2"], ["-a", "3"], ["-z", "1"], ["-z", "3"], ["-m", "3"],
                  ["-u", "1"], ["-R", "1"], ["-p", "1"], ["-y", "1"], ["-M", "1"], ["-G", "0"], ["-w", "0"]):
        rc, out, err = run([ar] + SMALL + ["-t", "2"] + flags)
        expect(rc == 0, "%s exited %d: %s" % (flags, rc, err), out)
        if flags[0] == "-M":
            expect("# Host memory per rank: " in out, "-M reports memory", out)
        else:
            check_output(out, "sn_allreduce_perf", 2, "allreduce", cputime=flags[0] == "-C")
    rc, out, err = run([ar] + SMALL + ["-N", "3"])
    rows, _ = check_output(out, "sn_allreduce_perf", 1, "allreduce")
    expect(rc == 0 and len(rows) == 15, "-N 3 repeats the sweep", out)
    rc, out, err = run([ar] + SMALL + ["-S", "1"])
    expect(rc == 0 and re.search(r"\s+0  \d{4}-\d\d-\d\d \d\d:\d\d:\d\d\n", out), "-S adds a timestamp", out)
    for flags, code, msg in ((["-G", "1"], 6, "needs CUDA"), (["-D", "1"], 6, "needs CUDA"), (["-x", "1"], 6, "CUDA"),
                             (["-V", "8"], 6, "CUDA"), (["-d", "float17"], 6, "invalid value"),
                             (["-b", "2K", "-e", "1K"], 6, "invalid sizes"), (["-K", "1"], 5, "not implemented")):
        rc, out, err = run([ar] + flags)
        expect(rc == code and msg in err, "%s: exit %d (want %d), stderr %r" % (flags, rc, code, err))
    rc, out, err = run([ar] + SMALL + ["-I", "1", "-n", "7"])
    calls = re.findall(r"#  per call \(us\), slowest rank: out-of-place p50 ([\d.]+) p99 ([\d.]+) max ([\d.]+); "
                       r"in-place p50 ([\d.]+) p99 ([\d.]+) max ([\d.]+)\n", out)
    rows, _ = check_output(out, "sn_allreduce_perf", 1, "allreduce") if rc == 0 else ([], None)
    expect(rc == 0 and len(calls) == len(rows) > 0 and
           all(0 < float(c[0]) <= float(c[1]) <= float(c[2]) and 0 < float(c[3]) <= float(c[4]) <= float(c[5])
               for c in calls), "-I 1 adds per-call percentiles to each row", out)
    rc, out, err = run([tool(a.bindir, "broadcast"), "-r", "3", "-t", "2"])
    expect(rc == 6 and "invalid root" in err, "root out of range", err)
    rc, out, err = run([tool(a.bindir, "hypercube"), "-t", "3"] + SMALL)
    expect(rc == 6 and "power-of-two" in err, "hypercube on 3 ranks", err)
    rc, out, err = run([ar, "-h"])
    expect(rc == 0 and "USAGE" in out, "-h prints usage", out)
    rc, out, err = run([ar] + SMALL, env={"NCCL_TESTS_MIN_BW": "1e12"})
    expect(rc == 7 and re.search(r"# Avg bus bandwidth    : \S+ FAILED\n", out), "NCCL_TESTS_MIN_BW too high", out)
    rc, out, err = run([ar] + SMALL, env={"NCCL_TESTS_MIN_BW": "0"})
    expect(rc == 0 and re.search(r"# Avg bus bandwidth    : \S+ OK\n", out), "NCCL_TESTS_MIN_BW met", out)
    rc, out, err = run([ar] + SMALL, env={"SNCCL_PERF_PROGRESS": "0.000001"})
    expect(rc == 0 and re.search(r"# progress: row \d+/5 ", err), "progress lines on stderr", err)
    print("ok options")


def launch_env(a, n, coll, args, env=None):
    return run([a.launcher, str(n), tool(a.bindir, coll)] + args, env=env)


def case_env(a):
    """Mode (c): processes from a RANK/WORLD_SIZE/MASTER_ADDR/MASTER_PORT launcher."""
    with tempfile.TemporaryDirectory() as tmp:
        for coll, extra in (("allreduce", []), ("alltoall", ["-t", "2"]), ("broadcast", ["-r", "all"]),
                            ("sendrecv", [])):
            js = os.path.join(tmp, coll + ".json")
            rc, out, err = launch_env(a, 2, coll, SMALL + ["-J", js] + extra)
            n = 2 * (2 if "-t" in extra else 1)
            expect(rc == 0, "%s on 2 processes exited %d: %s" % (coll, rc, err), out)
            rows, _ = check_output(out, "sn_%s_perf" % coll, n, coll, pids=2)
            check_json(js, rows, coll, n)
            print("ok %s: 2 processes, %d ranks" % (coll, n))
    rc, out, err = launch_env(a, 2, "allreduce", SMALL, env={"SNCCL_PERF_INJECT_WRONG": "1"})
    expect(rc == 7, "corruption across processes exits 7", out + err)
    rows, _ = check_output(out, "sn_allreduce_perf", 2, "allreduce", ok=False)
    expect(all(h["wrong"] == 2 for r in rows for h in r["half"]), "#wrong sums both processes", out)
    print("ok env mode: #wrong summed across processes")


# Odd element counts (3 and 32771 floats), the second spanning several pages.
ODD = ["-b", "12", "-e", "131084", "-i", "131072", "-n", "2", "-w", "1", "-c", "1"]


def case_alloc(a):
    """-A malloc and memalign: checked runs (both placements per row) on 2 and 3 thread ranks
    and on 2 processes, aligned and -u 1, alone and with -R 1; -M and -J name the kind."""
    with tempfile.TemporaryDirectory() as tmp:
        for alloc in ("malloc", "memalign"):
            for coll in ("allreduce", "broadcast", "sendrecv"):
                extra = ["-r", "all"] if coll in ROOTED else []
                for n in (2, 3):
                    for flags in ([], ["-u", "1"], ["-u", "1", "-R", "1"]):
                        js = os.path.join(tmp, "%s-%s-%d.json" % (alloc, coll, n))
                        args = [tool(a.bindir, coll)] + ODD + ["-t", str(n), "-A", alloc, "-J", js] + extra + flags
                        rc, out, err = run(args)
                        expect(rc == 0, "%s exited %d: %s" % (" ".join(args[1:]), rc, err), out)
                        rows, _ = check_output(out, "sn_%s_perf" % coll, n, coll, nthreads=n, ngpus=1)
                        expect(len(rows) == 2 * (n if coll in ROOTED else 1), "one row per size (and root)", out)
                        expect(any(r["count"] % 2 == 1 and r["count"] > 1024 for r in rows), "odd counts", out)
                        doc = check_json(js, rows, coll, n)
                        expect(doc["config"].get("alloc") == alloc, "JSON config names the allocation")
                for flags in ([], ["-u", "1", "-R", "1"]):
                    rc, out, err = launch_env(a, 2, coll, ODD + ["-A", alloc] + extra + flags)
                    expect(rc == 0, "%s -A %s %s on 2 processes exited %d: %s" % (coll, alloc, flags, rc, err), out)
                    check_output(out, "sn_%s_perf" % coll, 2, coll, pids=2)
                print("ok %s -A %s: 2 and 3 threads, 2 processes" % (coll, alloc))
        want = {"memalloc": "(ncclMemAlloc, prefaulted", "malloc": "(malloc, ncclCommRegister, prefaulted",
                "memalign": "(posix_memalign 64, prefaulted"}
        for alloc, text in want.items():
            flags = ["-R", "1"] if alloc == "malloc" else []
            rc, out, err = run([tool(a.bindir, "allreduce")] + SMALL + ["-t", "2", "-M", "1", "-A", alloc] + flags)
            expect(rc == 0 and "# Host memory per rank: " in out and text in out, "-M names the allocation", out)
        rc, out, err = run([tool(a.bindir, "allreduce"), "-A", "mmap"])
        expect(rc == 6 and "invalid value" in err, "-A mmap is refused", err)
        print("ok -M and usage")


def case_mpi(a):
    """Mode (b): mpirun with the *_perf_mpi executables."""
    mpi_tool = tool(a.bindir, "allreduce", mpi=True)
    if not a.mpirun or not os.path.exists(mpi_tool):
        print("SKIPPED: MPI was not found at configure time, so the *_perf_mpi tools were not built")
        sys.exit(77)
    base = [a.mpirun, "-np", "2", "--oversubscribe"] + (["--allow-run-as-root"] if os.geteuid() == 0 else [])
    with tempfile.TemporaryDirectory() as tmp:
        for coll, extra in (("allreduce", []), ("allgather", ["-t", "2"]), ("reduce", ["-r", "all"])):
            js = os.path.join(tmp, coll + ".json")
            rc, out, err = run(base + [tool(a.bindir, coll, mpi=True)] + SMALL + ["-J", js] + extra)
            n = 2 * (2 if "-t" in extra else 1)
            expect(rc == 0, "mpirun %s exited %d: %s" % (coll, rc, err), out)
            rows, _ = check_output(out, "sn_%s_perf_mpi" % coll, n, coll, pids=2)
            check_json(js, rows, coll, n)
            print("ok mpirun %s: 2 processes, %d ranks" % (coll, n))
    for alloc in ("malloc", "memalign"):
        rc, out, err = run(base + [mpi_tool] + ODD + ["-A", alloc, "-u", "1"])
        expect(rc == 0, "mpirun allreduce -A %s exited %d: %s" % (alloc, rc, err), out)
        check_output(out, "sn_allreduce_perf_mpi", 2, "allreduce", pids=2)
        print("ok mpirun -A %s" % alloc)
    rc, out, err = run(base + [mpi_tool] + SMALL, env={"SNCCL_PERF_INJECT_WRONG": "1"})
    expect(rc != 0 and "FAILED" in out, "corruption under mpirun fails the job", out + err)
    rc, out, err = run(base + [tool(a.bindir, "allreduce")] + SMALL)
    expect(rc != 0 and "does not use MPI" in err, "a plain tool under mpirun says to use the _mpi twin", err)
    print("ok mpirun")


def case_timeout(a):
    """-T: a missing peer, and a stopped peer inside a collective, both end with exit 4."""
    env = {"RANK": "0", "WORLD_SIZE": "2", "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(free_port())}
    rc, out, err = run([tool(a.bindir, "allreduce"), "-T", "2"] + SMALL, env=env, timeout=120)
    expect(rc == 4 and re.search(r"^\S+: Test timeout \(2s\) \S+:\d+$", out, re.M), "missing peer", out + err)
    print("ok timeout: missing peer")
    port = str(free_port())
    with tempfile.TemporaryDirectory() as tmp:
        procs, outs = [], []
        for r in range(2):
            e = dict(os.environ, RANK=str(r), WORLD_SIZE="2", MASTER_ADDR="127.0.0.1", MASTER_PORT=port)
            outs.append(open(os.path.join(tmp, "r%d.out" % r), "w+"))
            procs.append(subprocess.Popen([tool(a.bindir, "allreduce"), "-T", "3", "-b", "64K", "-e", "64K",
                                           "-n", "100000000"], stdout=outs[r], stderr=subprocess.STDOUT, env=e))
        try:
            deadline = time.time() + HANG_LIMIT
            while time.time() < deadline and "(elements)" not in open(outs[0].name).read():
                time.sleep(0.1)
            time.sleep(0.5)  # inside the timed loop by now
            procs[1].send_signal(signal.SIGSTOP)
            rc = procs[0].wait(timeout=HANG_LIMIT)
            text = open(outs[0].name).read()
            expect(rc == 4 and re.search(r"\S+: Test timeout \(3s\) \S+:\d+", text), "stopped peer", text)
        finally:
            for p in procs:
                if p.poll() is None:
                    p.kill()
                    p.wait()
    print("ok timeout: stopped peer, communicators aborted, exit 4")


def free_port():
    # Below the ephemeral range (32768+) that bootstrap listeners of parallel tests use,
    # so nobody takes it between this check and the tool's bind.
    import random
    import socket
    for _ in range(200):
        p = random.randrange(20000, 32000)
        s = socket.socket()
        try:
            s.bind(("127.0.0.1", p))
            return p
        except OSError:
            pass
        finally:
            s.close()
    raise RuntimeError("no free port in 20000-32000")


CASES = {"format": case_format, "groups": case_groups, "types": case_types, "inject": case_inject,
         "options": case_options, "env": case_env, "alloc": case_alloc, "mpi": case_mpi, "timeout": case_timeout}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--bindir", required=True)
    ap.add_argument("--launcher", required=True)
    ap.add_argument("--mpirun", default="")
    ap.add_argument("case", choices=sorted(CASES))
    a = ap.parse_args()
    try:
        CASES[a.case](a)
    except Failure as f:
        print("FAILED:", f)
        return 1
    except subprocess.TimeoutExpired as t:
        print("FAILED: hung:", t)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())

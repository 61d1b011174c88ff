# Phases of the decode step's kernels from a phases build (phases.patch + exp_trace_phases.cuh,
# bench/measure/README.md): python3 phases.py DIR, after ONEPASS_TRACE=DIR onepass bench ...
# Per mv1 product (tag n k), medians over its blocks in the steady decode, us:
#   land    block start -> its first weight item landed (stamped before the PDL wait)
#   early   block start -> PDL wait returned
#   stage   wait -> x staged (after the block barrier)
#   prests  x staged -> warp 0 about to copy its first item into its stage
#   sts     the copy into the stage
#   dot     -> warp 0's first dot product done
#   wsum    -> its warp sums done
#   finish  -> its stores issued
#   tail    -> the block's last warp done
# Then per kernel of a layer (products and attention): the gap from the previous kernel's
# last block end to its first wait return, its span to its last block end, and the period.
import struct, sys, collections, statistics
recs = []
data = open(sys.argv[1] + "/matmul.bin", "rb").read()
n = struct.unpack_from("I", data, 0)[0]
for i in range(min(n, (len(data) - 4) // 96)):
    r = struct.unpack_from("IIIIQQQQQQQQQQ", data, 4 + 96 * i)
    if r[4]: recs.append(r)
recs.sort(key=lambda r: r[5])
recs = recs[len(recs) * 6 // 10:]
by = collections.defaultdict(list)
for r in recs: by[(r[0], r[1], r[2])].append(r)
md = lambda x: statistics.median(x) / 1000.0 if x else float('nan')
# t0 start, t1 wait returned, t2 x staged, t3 first weights landed (before the wait), t4 dot, t5 warp sums, t6 stores issued, t7 end
cols = [("land", 3, 0), ("early", 1, 0), ("stage", 2, 1), ("prests", 4, 2), ("sts", 5, 4), ("dot", 6, 5), ("wsum", 7, 6), ("finish", 8, 7), ("tail", 9, 8), ("total", 9, 1)]
print("%-16s %6s " % ("kernel n k", "blocks") + " ".join("%6s" % c[0] for c in cols))
for key, rs in by.items():
    ok = [r for r in rs if all(r[4:14])]
    if not ok: continue
    print("%-16s %6d " % ("%d %d %d" % key, len(ok)) + " ".join("%6.2f" % md([r[4 + c[1]] - r[4 + c[2]] for r in ok]) for c in cols))
# instances over matmul + attention: gap from the previous instance's last end to the first wait return, and span to the last end
allr = []
for name in ("matmul", "attention"):
    data = open(sys.argv[1] + "/" + name + ".bin", "rb").read()
    n = struct.unpack_from("I", data, 0)[0]
    for i in range(min(n, (len(data) - 4) // 96)):
        r = struct.unpack_from("IIIIQQQQQQQQQQ", data, 4 + 96 * i)
        if r[4] and r[5]: allr.append(r)
allr.sort(key=lambda r: r[5])
groups = collections.defaultdict(list)
for r in allr: groups[(r[0], r[1], r[2])].append(r)
inst = []
for key, rs in groups.items():
    cur = [rs[0]]
    for r in rs[1:]:
        if r[5] - cur[-1][5] > 2000: inst.append((key, cur)); cur = [r]
        else: cur.append(r)
    inst.append((key, cur))
rows = [dict(key=k, w0=min(r[5] for r in rs), e1=max(r[13] for r in rs), n=len(rs)) for k, rs in inst]
rows.sort(key=lambda d: d["w0"])
last = rows[len(rows) * 6 // 10:]
st = collections.OrderedDict()
for i in range(1, len(last)):
    d, p = last[i], last[i - 1]
    s = st.setdefault(d["key"], collections.defaultdict(list))
    s["gap"].append(d["w0"] - p["e1"]); s["span"].append(d["e1"] - d["w0"]); s["period"].append(d["e1"] - p["e1"])
print("%-18s %7s %7s %7s" % ("kernel", "gap", "span", "period"))
for k, s in st.items():
    print("%-18s %7.2f %7.2f %7.2f" % ("%d %d %d" % k, md(s["gap"]), md(s["span"]), md(s["period"])))

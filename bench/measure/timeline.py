# Timeline of the traced decode kernels: per kernel instance (tag, n, k, consecutive blocks)
import struct, sys, collections, statistics
recs = []
for name in ("matmul", "attention"):
    data = open(sys.argv[1] + "/" + name + ".bin", "rb").read()
    n = struct.unpack_from("I", data, 0)[0]
    cap = (len(data) - 4) // 48
    for i in range(min(n, cap)):
        tag, nn, k, blk, t0, t1, t2, t3 = struct.unpack_from("IIIIQQQQ", data, 4 + 48 * i)
        if t0: recs.append((tag, nn, k, blk, t0, t1, t2, t3))
    print(name, "n =", n, "recs so far", len(recs), file=sys.stderr)
recs.sort(key=lambda r: r[5])
# instances: group by (tag, n, k) with a gap of more than 2 us in wait-return times
groups = collections.defaultdict(list)
for r in recs: groups[(r[0], r[1], r[2])].append(r)
inst = []
for key, rs in groups.items():
    cur = [rs[0]]
    for r in rs[1:]:
        if r[5] - cur[-1][5] > 2000: inst.append((key, cur)); cur = [r]
        else: cur.append(r)
    inst.append((key, cur))
rows = []
for key, rs in inst:
    rows.append(dict(key=key, blocks=len(rs), t0=min(r[4] for r in rs), w0=min(r[5] for r in rs), w1=max(r[5] for r in rs),
                     s1=max(r[6] for r in rs), e0=min(r[7] for r in rs), e1=max(r[7] for r in rs)))
rows.sort(key=lambda d: d["w0"])
names = {1: "mvq", 2: "mvd", 3: "attn", 4: "merge", 5: "short"}
# keep only the last ~40% of instances (steady decode), summarise by key in order within a layer
last = rows[len(rows) * 6 // 10:]
stat = collections.OrderedDict()
for i, d in enumerate(last[1:], 1):
    p = last[i - 1]
    key = d["key"]
    if d["blocks"] < 2: continue
    s = stat.setdefault(key, collections.defaultdict(list))
    s["gap_wait"].append(d["w0"] - p["e1"])      # prev last block end -> first wait return
    s["wait_spread"].append(d["w1"] - d["w0"])   # first to last wait return
    s["stage"].append(d["s1"] - d["w0"])         # first wait return -> last staging done
    s["work"].append(d["e1"] - d["w0"])          # first wait return -> last block end
    s["start_early"].append(d["w0"] - d["t0"])   # first block start -> first wait return
    s["blocks"].append(d["blocks"])
    s["period"].append(d["e1"] - p["e1"])
print("%-22s %5s %8s %8s %8s %8s %8s %8s %5s" % ("kernel(tag n k)", "count", "gapwait", "wspread", "stage", "work", "period", "early", "blks"))
tot = 0
for key, s in stat.items():
    md = lambda x: statistics.median(x) / 1000.0
    print("%-22s %5d %8.2f %8.2f %8.2f %8.2f %8.2f %8.2f %5d" % ("%s %d %d" % (names[key[0]], key[1], key[2]), len(s["gap_wait"]),
          md(s["gap_wait"]), md(s["wait_spread"]), md(s["stage"]), md(s["work"]), md(s["period"]), md(s["start_early"]), statistics.median(s["blocks"])))
# resolution check
ts = sorted(set(r[5] % 1000 for r in recs[:5000]))
print("globaltimer residues mod 1000 (first few):", ts[:12])

print("one stretch of instances (us relative):")
base = last[len(last)//2]["w0"]
for d in last[len(last)//2: len(last)//2 + 16]:
    print("%-20s blk %4d start %7.2f wait %7.2f..%7.2f staged %7.2f end %7.2f..%7.2f" % ("%s %d %d" % (names[d["key"][0]], d["key"][1], d["key"][2]), d["blocks"],
          (d["t0"]-base)/1e3, (d["w0"]-base)/1e3, (d["w1"]-base)/1e3, (d["s1"]-base)/1e3, (d["e0"]-base)/1e3, (d["e1"]-base)/1e3))

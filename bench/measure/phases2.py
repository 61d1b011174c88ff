# Phases of a phases2 build's records (72 bytes: tag n k blk t0..t6, t6 = block end): python3
# bench/measure/phases2.py DIR. Per kernel of the steady decode: gap (previous kernel's last
# block end -> first wait return), work (first wait return -> last block end), tail (last end
# - median end), and per block pre (start -> wait), stage (wait -> x staged), sums (staged ->
# warp 0's first sums), store (its first epilogue), after (-> block end, which includes the
# trace's own global atomic: ~0.35 us), then the blocks that end late.
import struct, sys, collections, statistics
recs = []
for name in ("matmul", "attention"):
    data = open(sys.argv[1] + "/" + name + ".bin", "rb").read()
    n = struct.unpack_from("I", data, 0)[0]
    for i in range(min(n, (len(data) - 4) // 72)):
        r = struct.unpack_from("IIIIQQQQQQQ", data, 4 + 72 * i)
        if r[4] and r[5]: recs.append(r)
recs.sort(key=lambda r: r[5])
groups = collections.defaultdict(list)
for r in recs: groups[(r[0], r[1], r[2])].append(r)
inst = []
for key, rs in groups.items():
    cur = [rs[0]]
    for r in rs[1:]:
        if r[5] - cur[-1][5] > 2000: inst.append((key, cur)); cur = [r]
        else: cur.append(r)
    inst.append((key, cur))
inst.sort(key=lambda kr: min(r[5] for r in kr[1]))
names = {1: "mvq", 2: "mvd", 3: "attn", 4: "bulk", 5: "short"}
last = inst[len(inst) * 6 // 10:]
md = lambda x: statistics.median(x) / 1000.0 if x else float('nan')
stat = collections.OrderedDict()
for i in range(1, len(last)):
    key, rs = last[i]
    prev_end = max(r[10] for r in last[i - 1][1])
    s = stat.setdefault(key, collections.defaultdict(list))
    w0 = min(r[5] for r in rs); e1 = max(r[10] for r in rs)
    ends = sorted(r[10] for r in rs)
    s["gap"].append(w0 - prev_end)
    s["work"].append(e1 - w0)
    s["tail"].append(e1 - ends[len(ends) // 2])
    s["blocks"].append(len(rs))
    for r in rs:
        t = r[4:11]
        s["pre"].append(t[1] - t[0])
        s["wspread"].append(t[1] - w0)
        if t[2]: s["stage"].append(t[2] - t[1])
        if t[3] and t[2]: s["sums"].append(t[3] - t[2])
        if t[4] and t[3]: s["store"].append(t[4] - t[3])
        if t[4]: s["after"].append(t[6] - t[4])
        if key[0] == 3 and t[3]: s["merge"].append(t[6] - t[3])
        if key[0] == 3 and t[4] and t[2]: s["clbar"].append(t[4] - t[2])
    lastblk = max(rs, key=lambda r: r[10])[3]
    s["lastblk"].append(lastblk)
print("%-18s %4s %6s %6s %6s | %6s %6s %6s %6s %6s %6s %6s %5s" % ("kernel", "n", "gap", "work", "tail", "pre", "wsprd", "stage", "sums", "store", "after", "merge", "blks"))
for key, s in stat.items():
    print("%-18s %4d %6.2f %6.2f %6.2f | %6.2f %6.2f %6.2f %6.2f %6.2f %6.2f %6.2f %5d" % (
        "%s %d %d" % (names.get(key[0], key[0]), key[1], key[2]), len(s["gap"]), md(s["gap"]), md(s["work"]), md(s["tail"]),
        md(s["pre"]), md(s["wspread"]), md(s["stage"]), md(s["sums"]), md(s["store"]), md(s["after"]), md(s["merge"] or s["clbar"]), statistics.median(s["blocks"])))
    c = collections.Counter(s["lastblk"]).most_common(6)
    print("    last blocks:", c)
# per-block end offsets for the kernels (median over instances of end - median end), top 8 late blocks
for key, s in stat.items():
    pass
late = collections.defaultdict(lambda: collections.defaultdict(list))
for key, rs in last:
    ends = sorted(r[10] for r in rs); mid = ends[len(ends) // 2]
    for r in rs: late[key][r[3]].append(r[10] - mid)
for key, d in late.items():
    top = sorted(((statistics.median(v) / 1000, b) for b, v in d.items()), reverse=True)[:10]
    print("%-18s late blocks (us after median end): %s" % ("%s %d %d" % (names.get(key[0], key[0]), key[1], key[2]), " ".join("%d:%.2f" % (b, t) for t, b in top)))
total = (max(r[10] for r in last[-1][1]) - min(r[5] for r in last[1][1])) / 1000
print("stretch %.1f us over %d instances" % (total, len(last) - 1))

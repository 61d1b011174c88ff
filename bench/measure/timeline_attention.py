# per-block start / wait / keys / end of attention instances (tag 3) in steady decode
import struct, sys, collections, statistics
d = sys.argv[1]
recs = []
data = open(d + "/attention.bin", "rb").read()
n = struct.unpack_from("I", data, 0)[0]
for i in range(min(n, (len(data) - 4) // 48)):
    tag, nn, k, blk, t0, t1, t2, t3 = struct.unpack_from("IIIIQQQQ", data, 4 + 48 * i)
    if t0 and t1: recs.append((tag, nn, k, blk, t0, t1, t2, t3))
recs.sort(key=lambda r: r[5])
inst = []; cur = [recs[0]]
for r in recs[1:]:
    if r[5] - cur[-1][5] > 2000: inst.append(cur); cur = [r]
    else: cur.append(r)
inst.append(cur)
chunks = recs[0][2]
rel = collections.defaultdict(lambda: collections.defaultdict(list))
for one in inst[len(inst) * 6 // 10:]:
    w0 = min(r[5] for r in one)
    for r in one:
        c = r[3] % chunks; h = r[3] // chunks
        rel[c]["start"].append((r[4] - w0) / 1e3); rel[c]["wait"].append((r[5] - w0) / 1e3)
        rel[c]["keys"].append((r[6] - w0) / 1e3 if r[6] else float('nan')); rel[c]["end"].append((r[7] - w0) / 1e3)
for c in sorted(rel):
    s = rel[c]
    q = lambda x: "%6.2f/%6.2f/%6.2f" % (statistics.quantiles(x, n=10)[0], statistics.median(x), statistics.quantiles(x, n=10)[-1])
    print("chunk %d n=%d start %s wait %s keys %s end %s" % (c, len(s["start"]), q(s["start"]), q(s["wait"]), q([v for v in s["keys"] if v == v] or [0,0]), q(s["end"])))
# by head for chunk 0
one = inst[len(inst) * 3 // 4]
w0 = min(r[5] for r in one)
for r in sorted(one, key=lambda r: r[3]):
    print("blk %3d (head %d chunk %d) start %6.2f wait %6.2f keys %6.2f end %6.2f" % (r[3], r[3] // chunks, r[3] % chunks, (r[4]-w0)/1e3, (r[5]-w0)/1e3, ((r[6]-w0)/1e3) if r[6] else -1, (r[7]-w0)/1e3))

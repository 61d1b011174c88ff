# Blocks that reach their PDL wait late, from a timeline build (timeline.patch + exp_trace.cuh,
# 48-byte records: tag, n, k, block, t0 start, t1 wait returned, t2, t3 end). For the check,
# move a kernel's stamp 2 to just before its pdl_wait() ("reached"): a block that reaches
# the wait after the first block's wait has returned holds the whole kernel back.
#   python3 timeline_blocks.py DIR [matmul|attention]
# Prints per kernel (tag n k), medians over the steady decode (last 40% of instances): the
# spread of block starts and of wait returns, how many blocks reached the wait late, the
# spread of block ends, and the blocks most often late.
import collections
import statistics
import struct
import sys

directory = sys.argv[1]
files = sys.argv[2:] or ["matmul", "attention"]
recs = []
for name in files:
    data = open(f"{directory}/{name}.bin", "rb").read()
    count = struct.unpack_from("I", data, 0)[0]
    for i in range(min(count, (len(data) - 4) // 48)):
        r = struct.unpack_from("IIIIQQQQ", data, 4 + 48 * i)
        if r[4] and r[5]:
            recs.append(r)
recs.sort(key=lambda r: r[5])
by_key = collections.defaultdict(list)
for r in recs:
    by_key[r[:3]].append(r)
for key, rs in sorted(by_key.items()):
    # Instances: wait returns more than 2 us apart start a new one.
    instances, cur = [], [rs[0]]
    for r in rs[1:]:
        if r[5] - cur[-1][5] > 2000:
            instances.append(cur)
            cur = [r]
        else:
            cur.append(r)
    instances.append(cur)
    instances = instances[len(instances) * 6 // 10:]
    stats = collections.defaultdict(list)
    late_blocks = collections.Counter()
    for inst in instances:
        w0 = min(r[5] for r in inst)
        stats["start spread"].append(max(r[4] for r in inst) - min(r[4] for r in inst))
        stats["wait spread"].append(max(r[5] for r in inst) - w0)
        stats["end spread"].append(max(r[7] for r in inst) - min(r[7] for r in inst))
        late = [r for r in inst if r[6] > w0 or r[4] > w0]
        stats["late blocks"].append(len(late) * 1000)
        late_blocks.update(r[3] for r in late)
    print("tag %d n %d k %d:" % key,
          ", ".join("%s %.2f" % (k, statistics.median(v) / 1000.0) for k, v in stats.items()),
          "| most often late:", late_blocks.most_common(4))

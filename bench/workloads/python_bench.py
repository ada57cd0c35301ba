# python workload: dicts, lists and strings built, serialized and parsed.
# Deterministic (no sets or hash-order output); prints "checksum: HEX".
# Usage: python3 python_bench.py [rounds=4]
import hashlib
import json
import sys


def make_records(seed, n):
    x = seed
    out = []
    for i in range(n):
        x = (x * 6364136223846793005 + 1442695040888963407) & (2**64 - 1)
        out.append({
            "id": i,
            "name": "user-%d-%x" % (i, x >> 40),
            "tags": ["t%d" % ((x >> s) & 63) for s in range(0, 40, 8)],
            "score": (x >> 11) / 2**53,
            "payload": "x" * ((x >> 20) & 255),
            "nested": {"a": [i, i * 2, str(i)], "b": {"c": x & 1023}},
        })
    return out


def main():
    rounds = int(sys.argv[1]) if len(sys.argv) > 1 else 4
    h = hashlib.sha256()
    for r in range(rounds):
        recs = make_records(r + 1, 20000)
        text = json.dumps(recs, sort_keys=True)
        back = json.loads(text)
        back.sort(key=lambda d: (d["nested"]["b"]["c"], d["name"]))
        index = {}
        for d in back:
            index.setdefault(d["tags"][0], []).append(d["id"])
        parts = []
        for k in sorted(index):
            parts.append("%s:%d:%d" % (k, len(index[k]), sum(index[k])))
        joined = ",".join(parts)
        words = " ".join(d["name"] for d in back).split("-")
        h.update(joined.encode())
        h.update(str(len(text)).encode())
        h.update(str(len(words)).encode())
    print("checksum: %s" % h.hexdigest()[:16])


main()

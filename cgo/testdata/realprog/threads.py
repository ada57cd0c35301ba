# python3 with threads: workers build dicts, lists, strings and byte buffers
# (small, growing and large blocks), hand objects to other threads to free,
# start threads of their own, and print results that do not depend on
# scheduling.

import hashlib
import os
import queue
import random
import sys
import threading

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import preloadcheck  # noqa: E402

N_THREADS = 8
ITEMS = 30000

results = {}
results_lock = threading.Lock()
barrier = threading.Barrier(N_THREADS)
handoff = queue.Queue(maxsize=64)
consumed = []


def digest(obj):
    return hashlib.sha256(repr(obj).encode()).hexdigest()[:16]


def build(k):
    rng = random.Random(k)
    d = {}
    for i in range(ITEMS):
        key = "key-%d-%d" % (k, i)
        d[key] = [i, str(i) * (i % 9), rng.random(), (k, i)]
    # Delete and re-insert half: frees and reuses blocks of every size.
    for i in range(0, ITEMS, 2):
        del d["key-%d-%d" % (k, i)]
    for i in range(0, ITEMS, 4):
        d["again-%d" % i] = {"v": "x" * (i % 300), "l": list(range(i % 50))}
    # Growing buffers (realloc chains) and large blocks.
    buf = bytearray()
    parts = []
    for i in range(3000):
        buf += bytes([i % 256]) * (i % 97)
        parts.append("%x" % (i * k + 7))
    s = "-".join(parts)
    big = [bytes([k]) * (1 << 20) for _ in range(4)]
    big_sum = sum(len(b) for b in big)
    del big
    lst = sorted(d.keys())
    words = s.split("-")
    words.sort(key=lambda w: (len(w), w))
    return {
        "dict": len(d),
        "dict_digest": digest(sorted((k2, repr(v)) for k2, v in d.items())),
        "buf": hashlib.sha256(buf).hexdigest()[:16],
        "str": len(s),
        "words": digest(words[:200]),
        "keys": digest(lst[-100:]),
        "big": big_sum,
    }


def nested(k, out):
    # A thread started by a thread.
    out.append(digest([str(i) * 3 for i in range(k * 500)]))


def worker(k):
    barrier.wait()
    r = build(k)
    inner = []
    t = threading.Thread(target=nested, args=(k, inner))
    t.start()
    # Produce objects that the consumer thread frees.
    for i in range(400):
        handoff.put((k, i, ["p%d" % j for j in range(i % 40)], "z" * (i * 13 % 5000)))
    t.join()
    r["nested"] = inner[0]
    with results_lock:
        results[k] = r


def consumer(total):
    n = 0
    acc = 0
    for _ in range(total):
        k, i, lst, s = handoff.get()
        acc += k * 1000003 + i + len(lst) + len(s)
        n += 1
        del lst, s
    consumed.append((n, acc))


def main():
    preloadcheck.report("python3-main")
    c = threading.Thread(target=consumer, args=(N_THREADS * 400,))
    c.start()
    threads = [threading.Thread(target=worker, args=(k,)) for k in range(N_THREADS)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    c.join()
    for k in sorted(results):
        r = results[k]
        print("thread %d: %s" % (k, " ".join("%s=%s" % (n, r[n]) for n in sorted(r))))
    print("consumed: n=%d acc=%d" % consumed[0])
    print("all: %s" % digest(sorted(results.items())))


if __name__ == "__main__":
    main()

# python3 multiprocessing with the fork start method: a Pool of 4 workers
# (replaced every few tasks, so the pool's handler thread forks new workers
# while the parent runs other threads), a child that forks again, and plain
# os.fork() calls made while other threads allocate. Prints results that do
# not depend on scheduling.

import hashlib
import multiprocessing
import os
import sys
import threading

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import preloadcheck  # noqa: E402


def digest(obj):
    return hashlib.sha256(repr(obj).encode()).hexdigest()[:16]


def churn(seed, n):
    d = {}
    for i in range(n):
        d[i] = ("%d-%d" % (seed, i)) * (1 + i % 11)
        if i % 3 == 0:
            del d[i // 2]
    big = bytearray(b"q") * (256 << 10 if seed % 2 else 3 << 20)
    vals = sorted(d.values())
    return len(d), digest(vals[:50] + vals[-50:]), len(big)


def init_worker():
    preloadcheck.report("pool-worker")


def work(n):
    return n, churn(n, 6000 + n * 97)


def grandchild_main(w):
    preloadcheck.report("fork-grandchild")
    os.write(w, digest(churn(99, 5000)).encode())
    os.close(w)


def child_main(q):
    preloadcheck.report("fork-child")
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:
        os.close(r)
        try:
            grandchild_main(w)
        finally:
            os._exit(0)
    os.close(w)
    data = b""
    while True:
        b = os.read(r, 4096)
        if not b:
            break
        data += b
    os.close(r)
    _, status = os.waitpid(pid, 0)
    q.put(("grandchild", data.decode(), os.waitstatus_to_exitcode(status), churn(7, 3000)))


stop = threading.Event()


def background(seed):
    # Keeps allocating while the main thread forks.
    i = 0
    while not stop.is_set():
        churn(seed + i, 300)
        i += 1


def fork_while_threads():
    threads = [threading.Thread(target=background, args=(s,)) for s in (1000, 2000)]
    for t in threads:
        t.start()
    codes = []
    for i in range(12):
        pid = os.fork()
        if pid == 0:
            code = 1
            try:
                if i == 0:
                    preloadcheck.report("fork-with-threads")
                n, _, _ = churn(i, 1000)
                code = 10 + (n + i) % 50
            finally:
                os._exit(code)
        _, status = os.waitpid(pid, 0)
        codes.append(os.waitstatus_to_exitcode(status))
    stop.set()
    for t in threads:
        t.join()
    return codes


def main():
    preloadcheck.report("python3-main")
    ctx = multiprocessing.get_context("fork")
    with ctx.Pool(4, initializer=init_worker, maxtasksperchild=4) as pool:
        mapped = pool.map(work, range(48), chunksize=1)
        unordered = sorted(pool.imap_unordered(work, range(48, 64)))
    for n, r in mapped + unordered:
        print("item %d: %s" % (n, r))

    q = ctx.Queue()
    p = ctx.Process(target=child_main, args=(q,))
    p.start()
    res = q.get(timeout=50)
    p.join()
    print("child: %s exitcode=%d" % (res, p.exitcode))

    print("fork with threads: %s" % fork_while_threads())


if __name__ == "__main__":
    main()

# Shared by the realprog Python scripts: records whether the preload library
# is mapped into the calling process. The line goes to the file named by
# $REALPROG_CHECK (never to stdout, which the test compares), so the test can
# tell that the library really reached this process.

import os


def report(role):
    path = os.environ.get("REALPROG_CHECK")
    lib = os.environ.get("REALPROG_LIB")
    if not path or not lib:
        return
    state = "absent"
    with open("/proc/self/maps") as f:
        for line in f:
            if line.rstrip("\n").endswith(lib):
                state = "mapped"
                break
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, ("%s %s\n" % (role, state)).encode())
    finally:
        os.close(fd)

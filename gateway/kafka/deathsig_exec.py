"""Run as a script: ask Linux to SIGTERM us when our parent dies, then exec the real command.

Usage: python -I -S deathsig_exec.py PARENT_PID COMMAND [ARG...]

The Kafka JVMs must die with the process that started them, also on kill -9. Setting
PR_SET_PDEATHSIG in a ``preexec_fn`` would make ``subprocess`` fork() the whole (threaded,
gRPC-loaded) interpreter and run Python in the child, which gRPC's fork handlers may abort.
This small program is spawned the ordinary way instead (vfork/exec), sets the signal for
itself, and the setting survives its exec of the JVM. It imports only the standard library.
"""

import ctypes
import ctypes.util
import os
import signal
import sys

_PR_SET_PDEATHSIG = 1


def main(argv: list[str]) -> None:
    parent, command = int(argv[1]), argv[2:]
    if sys.platform.startswith("linux"):
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)
        libc.prctl(_PR_SET_PDEATHSIG, signal.SIGTERM, 0, 0, 0)
        if os.getppid() != parent:  # the parent died before the setting took effect
            sys.exit(128 + signal.SIGTERM)
    os.execv(command[0], command)  # noqa: S606 - argv list, no shell


if __name__ == "__main__":
    main(sys.argv)

#!/usr/bin/env python3
"""How steady is this host's CPU speed? (docs/validation.md, "Rounds")

Times a fixed single-threaded workload over and over on the process CPU clock (so being
descheduled does not count) for SECONDS seconds, and prints the mean time per one-second
window, then the slowest and fastest windows against the mean. On the 2-core CI machine kind
the windows ranged 18-33 ms around a 26 ms mean: a plan replayed for 1-3 s measures the host's
speed of those seconds, which is why the fidelity report interleaves its replays over rounds.

Usage: python3 bench/fidelity/host_speed.py [SECONDS=40]
"""
import sys
import time


def work():
    s = 0
    for i in range(300000):
        s += i * i
    return s


def main():
    seconds = float(sys.argv[1]) if len(sys.argv) > 1 else 40.0
    windows, current, t_window = [], [], time.monotonic()
    end = t_window + seconds
    while time.monotonic() < end:
        c0 = time.process_time()
        work()
        current.append((time.process_time() - c0) * 1e3)
        if time.monotonic() - t_window >= 1.0:
            windows.append(sum(current) / len(current))
            current, t_window = [], time.monotonic()
    if not windows:
        sys.exit("host_speed: run for at least one second")
    mean = sum(windows) / len(windows)
    print("ms per workload, one-second windows:", " ".join(f"{w:.1f}" for w in windows))
    print(f"{len(windows)} windows: mean {mean:.1f} ms, fastest {min(windows):.1f} "
          f"({100 * (min(windows) / mean - 1):+.0f} %), slowest {max(windows):.1f} "
          f"({100 * (max(windows) / mean - 1):+.0f} %)")


if __name__ == "__main__":
    main()

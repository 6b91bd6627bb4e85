#!/usr/bin/env python3
"""Runs the upstream (CoreDNS) for the whole soak and injects the faults.

Starts CoreDNS (--coredns-cmd, split on spaces), waits until it answers
--check-name at --upstream, and writes --ready. When --go appears (it holds
the unix time the load started, t0), runs the schedule, times relative to
t0, computed from the soak's length:

  restart  SIGKILL CoreDNS, wait, start it again (until it answers)
  freeze   SIGSTOP CoreDNS, wait, SIGCONT
  hup      rewrite nodens's config (--nodens-config, toggling a zone
           setting so the reload changes something) and SIGHUP nodens
           (its PID read from --nodens-pid-file when --go appears)

Downtimes (restarts and the freeze) never overlap; they sit in the fault
window [warm-up + window + 2, end - window - 8] with equal gaps, shrunk in
proportion when they do not fit. The SIGHUPs are spread over the same
window wherever they fall, inside a downtime or not.

Every event is appended to --events as "unix time,event,detail". Keeps
CoreDNS running after the schedule until SIGTERM, then stops it (SIGCONT
first, in case it is frozen) and exits.
"""
import argparse
import os
import random
import re
import signal
import socket
import struct
import subprocess
import sys
import time


def dns_ok(server, name, timeout=0.5):
    ip, _, port = server.partition(":")
    q = struct.pack(">HHHHHH", random.getrandbits(16), 0x0100, 1, 0, 0, 0)
    for label in name.split("."):
        q += bytes([len(label)]) + label.encode()
    q += b"\0" + struct.pack(">HH", 1, 1)
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    s.settimeout(timeout)
    try:
        s.sendto(q, (ip, int(port or 53)))
        data = s.recv(4096)
        return len(data) >= 12 and data[:2] == q[:2] and (data[3] & 0xF) == 0
    except OSError:
        return False
    finally:
        s.close()


def schedule(args):
    """[(offset from t0, kind, duration)] sorted by offset."""
    d, w, win = args.seconds, args.warmup, args.window
    lo, hi = w + win + 2, d - win - 8
    span = max(0.0, hi - lo)
    downs = [["restart", float(args.restart_down)] for _ in range(args.restarts)]
    if args.freeze > 0:
        downs.insert(len(downs) // 2 + (1 if len(downs) % 2 else 0), ["freeze", float(args.freeze)])
    n = len(downs)
    ev = []
    if n:
        total = sum(x[1] for x in downs)
        min_gap = 3.0
        room = span - min_gap * (n + 1)
        if room <= 0:
            downs, n, total = [], 0, 0.0
        elif total > room:
            for x in downs:
                x[1] = round(x[1] * room / total, 1)
            total = sum(x[1] for x in downs)
        if n:
            gap = (span - total) / (n + 1)
            t = lo + gap
            for kind, dur in downs:
                ev.append((round(t, 1), kind, dur))
                t += dur + gap
    for k in range(args.hups):
        ev.append((round(lo + (k + 0.5) * span / max(1, args.hups) + 1.0, 1), "hup", 0.0))
    return sorted(ev)


class Soak:
    def __init__(self, args):
        self.args = args
        self.proc = None
        self.frozen = False
        self.hups = 0
        self.nodens_pid = 0
        self.log = open(args.events, "a", buffering=1)

    def event(self, name, detail=""):
        self.log.write(f"{time.time():.3f},{name},{detail}\n")

    def start_coredns(self, why):
        a = self.args
        self.proc = subprocess.Popen(a.coredns_cmd.split(), stdout=open(a.coredns_log, "a"),
                                     stderr=subprocess.STDOUT, start_new_session=True)
        t0 = time.time()
        while time.time() - t0 < 20:
            if self.proc.poll() is not None:
                self.event("coredns_exited", f"status {self.proc.returncode}")
                return False
            if dns_ok(a.upstream, a.check_name):
                self.event("coredns_up", f"pid {self.proc.pid} ({why}) after {time.time() - t0:.2f}s")
                return True
            time.sleep(0.1)
        self.event("coredns_not_answering", f"pid {self.proc.pid} ({why})")
        return False

    def stop_coredns(self, sig=signal.SIGTERM):
        if self.proc and self.proc.poll() is None:
            try:
                if self.frozen:
                    os.kill(self.proc.pid, signal.SIGCONT)
                    self.frozen = False
                os.kill(self.proc.pid, sig)
                self.proc.wait(5)
            except (OSError, subprocess.TimeoutExpired):
                try:
                    self.proc.kill()
                    self.proc.wait(2)
                except (OSError, subprocess.TimeoutExpired):
                    pass

    def hup(self):
        a = self.args
        self.hups += 1
        # Toggle a zone setting: the reload then builds a new zone router.
        with open(a.nodens_config) as f:
            text = f.read()
        if re.search(r'^max_ttl = "1h"$', text, re.M):
            text, now = re.sub(r'^max_ttl = "1h"$', 'max_ttl = "30m"', text, count=1, flags=re.M), "30m"
        else:
            text, now = re.sub(r'^max_ttl = "30m"$', 'max_ttl = "1h"', text, count=1, flags=re.M), "1h"
        tmp = a.nodens_config + ".tmp"
        with open(tmp, "w") as f:
            f.write(text)
        os.replace(tmp, a.nodens_config)
        try:
            if self.nodens_pid <= 0:
                raise OSError("no nodens PID")
            os.kill(self.nodens_pid, signal.SIGHUP)
            self.event("hup", f"reload {self.hups}, max_ttl {now}")
        except OSError as e:
            self.event("hup_failed", str(e))


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--coredns-cmd", required=True)
    p.add_argument("--coredns-log", required=True)
    p.add_argument("--upstream", required=True, help="IP:port CoreDNS answers on")
    p.add_argument("--check-name", default="pop-0.soak.test")
    p.add_argument("--nodens-pid-file", default="", help="read when --go appears")
    p.add_argument("--nodens-config", default="")
    p.add_argument("--events", required=True)
    p.add_argument("--ready", required=True)
    p.add_argument("--go", required=True)
    p.add_argument("--seconds", type=float, required=True)
    p.add_argument("--warmup", type=float, required=True)
    p.add_argument("--window", type=float, required=True)
    p.add_argument("--restarts", type=int, default=3)
    p.add_argument("--restart-down", type=float, default=10)
    p.add_argument("--freeze", type=float, default=15)
    p.add_argument("--hups", type=int, default=3)
    p.add_argument("--print-schedule", action="store_true")
    args = p.parse_args()

    if args.print_schedule:
        for t, kind, dur in schedule(args):
            print(f"{t:g} {kind} {dur:g}")
        return 0

    soak = Soak(args)
    stop = False

    def on_term(*_):
        nonlocal stop
        stop = True
    signal.signal(signal.SIGTERM, on_term)
    signal.signal(signal.SIGINT, on_term)

    def sleep_until(t):
        while not stop and time.time() < t:
            time.sleep(min(0.1, max(0.0, t - time.time())))

    try:
        if not soak.start_coredns("initial"):
            return 1
        open(args.ready, "w").close()
        while not stop and not os.path.exists(args.go):
            time.sleep(0.1)
        if stop:
            return 0
        with open(args.go) as f:
            t0 = float(f.read().strip())
        if args.nodens_pid_file:
            with open(args.nodens_pid_file) as f:
                soak.nodens_pid = int(f.read().strip())
        for off, kind, dur in schedule(args):
            sleep_until(t0 + off)
            if stop:
                break
            if kind == "hup":
                soak.hup()
            elif kind == "restart":
                soak.event("restart_start", f"SIGKILL coredns pid {soak.proc.pid}, down {dur:g}s")
                soak.stop_coredns(signal.SIGKILL)
                sleep_until(time.time() + dur)
                if stop:
                    break
                ok = soak.start_coredns("restart")
                soak.event("restart_end", "answering" if ok else "NOT answering")
            elif kind == "freeze":
                soak.event("freeze_start", f"SIGSTOP coredns pid {soak.proc.pid} for {dur:g}s")
                os.kill(soak.proc.pid, signal.SIGSTOP)
                soak.frozen = True
                sleep_until(time.time() + dur)
                os.kill(soak.proc.pid, signal.SIGCONT)
                soak.frozen = False
                soak.event("freeze_end", "SIGCONT")
        soak.event("schedule_done", "")
        while not stop:
            time.sleep(0.2)
            if soak.proc.poll() is not None:
                soak.event("coredns_exited", f"status {soak.proc.returncode}")
                soak.start_coredns("exited by itself")
    finally:
        soak.stop_coredns()
    return 0


if __name__ == "__main__":
    sys.exit(main())

#!/usr/bin/env python3
"""Lists the kernel's BPF links attached to network interfaces (tcx, XDP, netkit) as
"IFNAME TYPE prog PROG_ID", one a line: the interfaces that carry BPF programs.
bpftool 7.1 (Debian 12) prints tcx links as "type 11" without their interface.
Root only (bpf(2)). lab/kube/cilium-test checks that Cilium's programs stay off the
machine's own interfaces with it."""
import ctypes
import ctypes.util
import os
import socket
import struct
import sys

NR_BPF = 321  # x86_64
BPF_OBJ_GET_INFO_BY_FD, BPF_LINK_GET_FD_BY_ID, BPF_LINK_GET_NEXT_ID = 15, 30, 31
TYPES = {6: "xdp", 11: "tcx", 13: "netkit"}  # enum bpf_link_type

libc = ctypes.CDLL(ctypes.util.find_library("c"), use_errno=True)
libc.syscall.restype = ctypes.c_long


def bpf(cmd, attr):
    buf = ctypes.create_string_buffer(attr, 128)
    r = libc.syscall(NR_BPF, cmd, buf, ctypes.c_uint(128))
    return r, buf


def main():
    if os.geteuid() != 0:
        sys.exit("bpf-links: run as root")
    link_id = 0
    while True:
        r, buf = bpf(BPF_LINK_GET_NEXT_ID, struct.pack("III", link_id, 0, 0))
        if r < 0:
            break
        link_id = struct.unpack_from("I", buf, 4)[0]
        fd, _ = bpf(BPF_LINK_GET_FD_BY_ID, struct.pack("III", link_id, 0, 0))
        if fd < 0:
            continue
        info = ctypes.create_string_buffer(128)
        r, _ = bpf(BPF_OBJ_GET_INFO_BY_FD, struct.pack("IIQ", fd, 128, ctypes.addressof(info)))
        os.close(fd)
        if r < 0:
            continue
        ltype, _lid, prog_id = struct.unpack_from("III", info, 0)
        if ltype not in TYPES:
            continue
        # the union after type, id, prog_id is 8-byte aligned: ifindex first for all three
        ifindex = struct.unpack_from("I", info, 16)[0]
        try:
            name = socket.if_indextoname(ifindex)
        except OSError:
            name = f"ifindex{ifindex}"
        print(f"{name} {TYPES[ltype]} prog {prog_id}")


main()

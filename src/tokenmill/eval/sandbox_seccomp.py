"""The seccomp filter a sandboxed candidate runs under (namespaces isolation), as classic BPF bytes.

Written by hand rather than through libseccomp: Debian's `python3-seccomp` binds the system
Python only and is not on PyPI, so a venv built from nothing could not have it; the filter is
small (one comparison per denied call). Kept free of tokenmill imports: eval/sandbox_jail.py, which
runs in a bare interpreter, installs the bytes this module builds (sandbox.py passes them as hex).

The filter (kernel Documentation/userspace-api/seccomp_filter.rst):
* kills the process on any other architecture than the one it was built for (a 32-bit ABI would
  renumber every call), and refuses x86_64's x32 calls (numbers with bit 30 set);
* fails with EPERM every call that reaches outside the sandbox or changes its boundary: ptrace,
  process_vm_*, pidfd_*, kcmp; mount, umount, pivot_root, chroot, the new mount API, unshare, setns;
  keyctl, bpf, perf_event_open, io_uring (whose operations seccomp cannot see), module and kexec
  loading, clock and host-name setting, swap, reboot, syslog, acct, quotactl, personality;
* fails clone with EPERM when it asks for a new namespace, and clone3 with ENOSYS (its flags sit
  behind a pointer BPF cannot read; C libraries then fall back to clone);
* allows everything else.
"""

from __future__ import annotations

import struct

DENIED = (
    "ptrace", "process_vm_readv", "process_vm_writev", "pidfd_open", "pidfd_send_signal", "pidfd_getfd", "kcmp",
    "mount", "umount2", "pivot_root", "chroot", "open_tree", "move_mount", "fsopen", "fsconfig", "fsmount", "fspick",
    "mount_setattr", "unshare", "setns", "keyctl", "add_key", "request_key", "bpf", "perf_event_open", "userfaultfd",
    "io_uring_setup", "io_uring_enter", "io_uring_register", "init_module", "finit_module", "delete_module",
    "kexec_load", "kexec_file_load", "open_by_handle_at", "name_to_handle_at", "clock_settime", "clock_adjtime",
    "settimeofday", "adjtimex", "sethostname", "setdomainname", "swapon", "swapoff", "reboot", "syslog", "acct",
    "quotactl", "personality", "vhangup",
)  # fmt: skip

# Syscall numbers: arch/x86/entry/syscalls/syscall_64.tbl and include/uapi/asm-generic/unistd.h.
NUMBERS: dict[str, dict[str, int]] = {
    "x86_64": {
        "ptrace": 101, "process_vm_readv": 310, "process_vm_writev": 311, "pidfd_open": 434, "pidfd_send_signal": 424,
        "pidfd_getfd": 438, "kcmp": 312, "mount": 165, "umount2": 166, "pivot_root": 155, "chroot": 161,
        "open_tree": 428, "move_mount": 429, "fsopen": 430, "fsconfig": 431, "fsmount": 432, "fspick": 433,
        "mount_setattr": 442, "unshare": 272, "setns": 308, "keyctl": 250, "add_key": 248, "request_key": 249,
        "bpf": 321, "perf_event_open": 298, "userfaultfd": 323, "io_uring_setup": 425, "io_uring_enter": 426,
        "io_uring_register": 427, "init_module": 175, "finit_module": 313, "delete_module": 176, "kexec_load": 246,
        "kexec_file_load": 320, "open_by_handle_at": 304, "name_to_handle_at": 303, "clock_settime": 227,
        "clock_adjtime": 305, "settimeofday": 164, "adjtimex": 159, "sethostname": 170, "setdomainname": 171,
        "swapon": 167, "swapoff": 168, "reboot": 169, "syslog": 103, "acct": 163, "quotactl": 179,
        "personality": 135, "vhangup": 153, "clone": 56, "clone3": 435,
    },
    "aarch64": {
        "ptrace": 117, "process_vm_readv": 270, "process_vm_writev": 271, "pidfd_open": 434, "pidfd_send_signal": 424,
        "pidfd_getfd": 438, "kcmp": 272, "mount": 40, "umount2": 39, "pivot_root": 41, "chroot": 51,
        "open_tree": 428, "move_mount": 429, "fsopen": 430, "fsconfig": 431, "fsmount": 432, "fspick": 433,
        "mount_setattr": 442, "unshare": 97, "setns": 268, "keyctl": 219, "add_key": 217, "request_key": 218,
        "bpf": 280, "perf_event_open": 241, "userfaultfd": 282, "io_uring_setup": 425, "io_uring_enter": 426,
        "io_uring_register": 427, "init_module": 105, "finit_module": 273, "delete_module": 106, "kexec_load": 104,
        "kexec_file_load": 294, "open_by_handle_at": 265, "name_to_handle_at": 264, "clock_settime": 112,
        "clock_adjtime": 266, "settimeofday": 170, "adjtimex": 171, "sethostname": 161, "setdomainname": 162,
        "swapon": 224, "swapoff": 225, "reboot": 142, "syslog": 116, "acct": 89, "quotactl": 60,
        "personality": 92, "vhangup": 58, "clone": 220, "clone3": 435,
    },
}  # fmt: skip
AUDIT_ARCH = {"x86_64": 0xC000003E, "aarch64": 0xC00000B7}  # include/uapi/linux/audit.h
X32_BIT = 0x40000000
CLONE_NEW = 0x00020000 | 0x02000000 | 0x04000000 | 0x08000000 | 0x10000000 | 0x20000000 | 0x40000000 | 0x00000080
# BPF opcodes (include/uapi/linux/filter.h) and seccomp return values (include/uapi/linux/seccomp.h).
LD_W_ABS, JEQ, JGE, JSET, RET = 0x20, 0x15, 0x35, 0x45, 0x06
KILL_PROCESS, ALLOW, ERRNO = 0x80000000, 0x7FFF0000, 0x00050000
EPERM, ENOSYS = 1, 38
NR, ARCH, ARG0_LOW = 0, 4, 16  # offsets in struct seccomp_data (little-endian: arg 0's low word first)


def supported(machine: str) -> bool:
    return machine in NUMBERS


def filter_program(machine: str) -> bytes:
    """The filter for `machine` (os.uname().machine) as packed struct sock_filter entries."""
    nr = NUMBERS[machine]
    denied = [nr[name] for name in DENIED]
    # Instructions as (code, jump-if-true, jump-if-false, k); a jump is a label name or 0 (next).
    prog: list[tuple[int, int | str, int | str, int]] = [
        (LD_W_ABS, 0, 0, ARCH),
        (JEQ, 0, "kill", AUDIT_ARCH[machine]),
        (LD_W_ABS, 0, 0, NR),
    ]
    if machine == "x86_64":
        prog.append((JGE, "eperm", 0, X32_BIT))
    prog += [(JEQ, "eperm", 0, n) for n in denied]
    prog += [
        (JEQ, "enosys", 0, nr["clone3"]),
        (JEQ, 0, "allow", nr["clone"]),
        (LD_W_ABS, 0, 0, ARG0_LOW),
        (JSET, "eperm", "allow", CLONE_NEW),
    ]
    labels = {"allow": len(prog), "eperm": len(prog) + 1, "enosys": len(prog) + 2, "kill": len(prog) + 3}
    prog += [(RET, 0, 0, ALLOW), (RET, 0, 0, ERRNO | EPERM), (RET, 0, 0, ERRNO | ENOSYS), (RET, 0, 0, KILL_PROCESS)]

    def offset(at: int, target: int | str) -> int:
        return 0 if target == 0 else labels[str(target)] - at - 1

    return b"".join(struct.pack("<HBBI", code, offset(i, jt), offset(i, jf), k) for i, (code, jt, jf, k) in enumerate(prog))

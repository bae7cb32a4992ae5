"""MLIR bytecode and StableHLO portable artifacts -> generic text, read in a child process.

jaxlib's bytecode readers trust their input: fuzzing (``bench/fuzz.py``) found damaged
files that corrupt the heap, abort the process, crash it on a segmentation fault, or make
jaxlib raise a C++ exception that ends the process while it turns a message that is not
UTF-8 into a Python string. Here the bytes are read in a child process that prints the
module's generic text, which the caller parses in its own context: damage ends the child,
never the user's process.

The children come from a small server process started on the first read, which imports
jaxlib's MLIR bindings once (0.3 s; not jax) and forks one child per read (milliseconds),
so that every read starts from a clean heap. Each child runs under an address-space limit:
a damaged size field fails an allocation there instead of waking the kernel's OOM killer.
"""

from __future__ import annotations

import os
import select
import signal
import struct
import subprocess
import sys
import tempfile
import threading
import time
from typing import Any

from ..errors import ParseError

#: The server: reads requests (8-byte length, bytes) on stdin; for each, a forked child
#: writes ``T`` and the text or ``E`` and a message, and the server passes that on (or
#: ``C`` and the child's exit status if it died) to stdout, framed the same way.
_SERVER = r"""
import os, resource, struct, sys
from jaxlib.mlir import ir
from jaxlib.mlir._mlir_libs import _jax_mlir_ext
from jaxlib.mlir.dialects import chlo, mhlo, mpmd, sdy, stablehlo


def vm_size():
    with open("/proc/self/status") as status:
        return next(int(l.split()[1]) * 1024 for l in status if l.startswith("VmSize:"))


def read(data):
    errors = []

    def collect(diagnostic):
        # jaxlib's own capture of errors turns messages into str where a failure aborts
        if diagnostic.severity == ir.DiagnosticSeverity.ERROR:
            try:
                errors.append(diagnostic.message)
            except Exception:
                errors.append("(a message that is not UTF-8)")
        return True

    registry = ir.DialectRegistry()
    _jax_mlir_ext.register_dialects(registry)
    ctx = ir.Context()  # the dialects of jax's make_ir_context, without importing jax
    ctx.append_dialect_registry(registry)
    ctx.load_all_available_dialects()
    for dialect in (chlo, mpmd, sdy, stablehlo):
        dialect.register_dialect(ctx)
    mhlo.register_mhlo_dialect(ctx)
    ctx.emit_error_diagnostics = True
    ctx.attach_diagnostic_handler(collect)
    with ctx:
        try:
            module = stablehlo.deserialize_portable_artifact(ctx, data)
        except Exception:  # not a portable artifact: plain StableHLO bytecode
            errors.clear()
            try:
                module = ir.Module.parse(data, context=ctx)
            except Exception as exc:
                return b"E" + (errors[0] if errors else str(exc)).encode()
        try:
            return b"T" + module.operation.get_asm(print_generic_op_form=True,
                                                   enable_debug_info=True).encode()
        except Exception as exc:  # a string attribute that is not UTF-8
            return b"E" + f"{type(exc).__name__}: {exc}".encode()


def exact(stream, size):
    data = stream.read(size)
    if len(data) != size:
        sys.exit(0)  # our parent is gone
    return data


def serve():
    requests, replies = sys.stdin.buffer, sys.stdout.buffer
    while True:
        data = exact(requests, struct.unpack("<Q", exact(requests, 8))[0])
        read_end, write_end = os.pipe()
        pid = os.fork()
        if pid == 0:
            try:
                os.close(read_end)
                os.dup2(os.open(os.devnull, os.O_WRONLY), 1)  # stdout carries the replies
                try:  # room for the module's objects and its text, not for a damaged size
                    limit = vm_size() + 64 * len(data) + (2 << 30)
                    resource.setrlimit(resource.RLIMIT_AS, (limit, limit))
                except (OSError, ValueError, StopIteration):  # no /proc: no limit
                    pass
                try:
                    reply = memoryview(read(data))
                except BaseException as exc:  # MemoryError at the limit
                    reply = memoryview(b"E" + f"{type(exc).__name__}: {exc}".encode())
                while reply:
                    reply = reply[os.write(write_end, reply):]
            finally:
                os._exit(0)
        os.close(write_end)
        with os.fdopen(read_end, "rb") as pipe:
            reply = pipe.read()
        status = os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1])
        if status or reply[:1] not in (b"T", b"E"):
            reply = b"C" + str(status).encode()
        replies.write(struct.pack("<Q", len(reply)) + reply)
        replies.flush()


serve()
"""

#: seconds a read may take, plus one per MB: damaged bytecode can make the reader loop
#: forever (found by fuzzing), while a module reads at tens of MB/s
TIMEOUT = 30

_lock = threading.Lock()
#: the server process, the id of the process that started it (a fork has its own) and the
#: file that holds the server's stderr
_server: tuple[subprocess.Popen, int, Any] | None = None


def generic_text(data: bytes) -> str:
    """The generic text (with locations) of the module in ``data``, MLIR bytecode or a
    portable artifact; ParseError if it cannot be read."""
    timeout = TIMEOUT + len(data) / 1e6
    with _lock:
        for attempt in range(2):  # a server that has gone since its last read: a new one
            server = _running_server()
            try:
                server.stdin.write(struct.pack("<Q", len(data)) + data)
                server.stdin.flush()
                reply = _receive(server.stdout.fileno(), time.monotonic() + timeout)
                break
            except (OSError, EOFError) as exc:
                messages = _stop()
                if attempt or isinstance(exc, TimeoutError):
                    raise ParseError(f"cannot read MLIR bytecode: the reader did not answer "
                                     f"({type(exc).__name__}: {exc}) {messages}".rstrip()) \
                        from None
    if reply[:1] == b"T":
        return reply[1:].decode()
    if reply[:1] == b"E":
        raise ParseError(f"invalid MLIR bytecode: {reply[1:].decode(errors='replace')}")
    status = int(reply[1:])
    how = f"exit status {status}"
    if -status in signal.valid_signals():
        how = f"signal {signal.Signals(-status).name}"
    raise ParseError(f"invalid MLIR bytecode: jaxlib's reader ended on it ({how})")


def _running_server() -> subprocess.Popen:
    global _server
    if _server is None or _server[1] != os.getpid() or _server[0].poll() is not None:
        if _server is not None and _server[1] == os.getpid():
            _stop()
        elif _server is not None:  # a forked process: close its copies of the parent's pipes
            _server[0].stdin.close()
            _server[0].stdout.close()
            _server[2].close()
        # one thread of OpenBLAS: the server forks, and it does no linear algebra
        env = dict(os.environ, OPENBLAS_NUM_THREADS="1", OMP_NUM_THREADS="1")
        # its messages go to a file, read if it fails (a pipe could fill up and block it)
        messages = tempfile.TemporaryFile()
        # -I: the user's folder and environment put no module of theirs before jaxlib's
        process = subprocess.Popen([sys.executable, "-I", "-c", _SERVER], stdin=subprocess.PIPE,
                                   stdout=subprocess.PIPE, stderr=messages, env=env,
                                   start_new_session=True)
        _server = (process, os.getpid(), messages)
    return _server[0]


def _stop() -> str:
    """End the server and any child it is waiting for (they share a session); return the
    last line the server wrote to stderr."""
    global _server
    if _server is None:
        return ""
    (process, _, messages), _server = _server, None
    try:
        os.killpg(process.pid, signal.SIGKILL)
    except OSError:
        pass
    process.wait()
    process.stdin.close()
    process.stdout.close()
    messages.seek(0)
    lines = messages.read().decode(errors="replace").strip().splitlines()
    messages.close()
    return lines[-1] if lines else ""


def _receive(fd: int, deadline: float) -> bytes:
    size = struct.unpack("<Q", _exact(fd, 8, deadline))[0]
    return _exact(fd, size, deadline)


def _exact(fd: int, size: int, deadline: float) -> bytes:
    chunks, left = [], size
    while left:
        if not select.select([fd], [], [], max(0.0, deadline - time.monotonic()))[0]:
            raise TimeoutError("no answer before the time limit")
        chunk = os.read(fd, min(left, 1 << 20))
        if not chunk:
            raise EOFError("the reader ended")
        chunks.append(chunk)
        left -= len(chunk)
    return b"".join(chunks)

"""Files in and out of a sandbox over its channel, for a worker that shares no file
system with it (the Docker backend's remote mode): ``read_file`` (a delivery) and
``write_file`` (an attachment) under ``/work`` (``sv_display.framebuffer`` sends
Xvfb's file for a screenshot). Standard library only.

Each path is a list of name components below ``/work``, opened one at a time with
``O_NOFOLLOW``: neither a symlink nor ``..`` leads out. Only regular files are read, at
most ``max_bytes``; a file is written only where none exists (``O_EXCL``). The worker
applies its own checks and bounds to every reply: these are the sandbox's side of the
same rules, not what the worker relies on."""

import base64
import contextlib
import os
import stat

WORK_DIR = "/work"
# One file per request, base64 in a JSON reply under the channel's 16 MiB frame limit.
MAX_FILE_BYTES = 11 * 1024**2


def _parts(path: object) -> list[str] | None:
    if not isinstance(path, list) or not path or len(path) > 64:
        return None
    if not all(isinstance(p, str) and p not in ("", ".", "..") and "/" not in p for p in path):
        return None
    if any("\x00" in p for p in path):
        return None
    return path


def _open_dir(parts: list[str], create: bool) -> int:
    """The directory ``/work/<parts...>``, each component opened with O_NOFOLLOW (made
    when ``create``)."""
    fd = os.open(WORK_DIR, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW)
    try:
        for part in parts:
            if create:
                with contextlib.suppress(FileExistsError):
                    os.mkdir(part, 0o755, dir_fd=fd)
            next_fd = os.open(part, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW, dir_fd=fd)
            os.close(fd)
            fd = next_fd
    except BaseException:
        os.close(fd)
        raise
    return fd


def read_regular(fd: int, max_bytes: int) -> bytes | str:
    """The bytes of the open file ``fd`` (closed here), or why not."""
    info = os.fstat(fd)
    if not stat.S_ISREG(info.st_mode):
        os.close(fd)
        return "not a regular file"
    with os.fdopen(fd, "rb") as handle:
        if info.st_size > max_bytes:
            return f"{info.st_size} bytes, over the bound of {max_bytes}"
        data = handle.read(max_bytes + 1)
    if len(data) > max_bytes:
        return f"grew past the bound of {max_bytes} bytes while being read"
    return data


def read_file(path: object, max_bytes: int) -> dict:
    parts = _parts(path)
    if parts is None:
        return {"ok": False, "error": "not a path in the workspace"}
    try:
        dir_fd = _open_dir(parts[:-1], create=False)
    except OSError:
        return {"ok": False, "error": "a directory on the path is missing or a link"}
    try:
        fd = os.open(parts[-1], os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK, dir_fd=dir_fd)
    except OSError:
        return {"ok": False, "error": "does not exist or is a link"}
    finally:
        os.close(dir_fd)
    data = read_regular(fd, max_bytes)
    if isinstance(data, str):
        return {"ok": False, "error": data}
    return {"ok": True, "data": base64.b64encode(data).decode()}


def write_file(path: object, data: object, mode: object, offset: object = 0,
               more: object = False) -> dict:  # fmt: skip
    """Writes a new file in one request or in several: the first (``offset`` 0) makes
    it (never over an existing file), each next one appends at ``offset``, which must
    be the file's size. While ``more`` the file stays the writer's alone (0600); the
    last request gives it ``mode``."""
    parts = _parts(path)
    if parts is None or not isinstance(data, str):
        return {"ok": False, "error": "not a path in the workspace"}
    if not isinstance(offset, int) or isinstance(offset, bool) or offset < 0:
        return {"ok": False, "error": "the offset is not a size"}
    try:
        content = base64.b64decode(data, validate=True)
    except ValueError:
        return {"ok": False, "error": "the data is not base64"}
    mode = mode if isinstance(mode, int) and 0 <= mode <= 0o777 else 0o444
    try:
        dir_fd = _open_dir(parts[:-1], create=offset == 0)
    except OSError as exc:
        return {"ok": False, "error": f"cannot make the directory: {exc.strerror}"}
    try:
        if offset == 0:
            flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW
        else:
            flags = os.O_WRONLY | os.O_APPEND | os.O_NOFOLLOW | os.O_NONBLOCK
        fd = os.open(parts[-1], flags, 0o600, dir_fd=dir_fd)
        with os.fdopen(fd, "wb") as out:
            info = os.fstat(fd)
            if not stat.S_ISREG(info.st_mode) or info.st_size != offset:
                return {"ok": False, "error": "the file to append to is not as written"}
            out.write(content)
            out.flush()
            os.fchmod(fd, 0o600 if more is True else mode)
    except OSError as exc:
        return {"ok": False, "error": f"cannot write the file: {exc.strerror}"}
    finally:
        os.close(dir_fd)
    return {"ok": True, "size": offset + len(content)}

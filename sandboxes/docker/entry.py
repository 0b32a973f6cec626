"""The entrypoint of the desktop image that binds the host's /usr (``rootfs.sh``): the
arena's supervisor, unchanged, with Chromium started through ``/opt/arena/chromium``
(the wrapper that adds ``--no-sandbox`` where the container allows no user namespaces;
the host's Chromium is read-only here and cannot be wrapped in place). Standard library
only, like the supervisor: it runs on the host's python3."""

import importlib.util

spec = importlib.util.spec_from_file_location("supervisor", "/opt/arena/inside/supervisor.py")
assert spec is not None and spec.loader is not None
supervisor = importlib.util.module_from_spec(spec)
spec.loader.exec_module(supervisor)
supervisor.CHROMIUM = "/opt/arena/chromium"
supervisor.main()

"""The entrypoint of both desktop images (``scripts/image.sh``'s and ``rootfs.sh``'s):
the arena's supervisor, unchanged, with Chromium started through ``/opt/arena/chromium``
(the wrapper that adds ``--no-sandbox`` where the container allows no user namespaces;
in the image that binds the host's /usr, the host's Chromium is read-only and cannot be
wrapped in place). Standard library only, like the supervisor: it runs on the image's
python3 (or the host's)."""

import importlib.util

spec = importlib.util.spec_from_file_location("supervisor", "/opt/arena/inside/supervisor.py")
assert spec is not None and spec.loader is not None
supervisor = importlib.util.module_from_spec(spec)
spec.loader.exec_module(supervisor)
supervisor.CHROMIUM = "/opt/arena/chromium"
supervisor.main()

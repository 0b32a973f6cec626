"""The demo web: a small fixed website served to sandboxes as ``http://demo.arena.test/``
(docs/demo-web.md), and the demo tasks that need it.

- :mod:`.data`: the content (articles, directory, downloads) and ``DEMO_TASKS``, each
  ``{"instruction", "start_url", "category", "expected"}``; ``answer_matches`` checks
  a final answer against ``expected``.
- :mod:`.pages`: the pages, pure (a request in, a response out).
- :mod:`.server`: the threaded HTTP server a worker starts on 127.0.0.1 on first use;
  the egress proxy dials it for ``demo.arena.test`` (``sandboxes.services``).
"""

from sandboxes.demoweb.data import DEMO_TASKS, HOST, ORIGIN, answer_matches

__all__ = ["DEMO_TASKS", "HOST", "ORIGIN", "answer_matches"]

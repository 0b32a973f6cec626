"""The built-in offline agents (registered by name in ``agents.policies``). They drive
the desktop through the same fixed tool set as any entrant and read the page as text
(``Observation.page``); none knows a site's URLs beyond what the task and the pages
say. ``agents.builtins.script`` is their common machinery, ``agents.builtins.wording``
varies what they say, ``agents.builtins.reading`` reads pages and instructions."""

import agents.policies  # noqa: F401  (the types first: agents.policies imports us back)

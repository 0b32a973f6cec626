"""Coding battles: the judge's pure computations (issue 18).

What a test command printed (``results``), the judge's scores and their composite
(``scores``), and the trajectory and usage metrics of a run (``metrics``). Nothing here
imports Django or an app's models; the services that run the judge sandbox persist what
these functions return. Every parser takes text that an entrant controls: it is bounded,
and it returns ``None`` rather than raising on garbage.
"""

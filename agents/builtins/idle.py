"""The weakest built-in: opens the page the task names, scrolls once and gives up (or
guesses from the page's title alone). It never reads the page's text or clicks."""

from agents.builtins import reading as r
from agents.builtins.script import Script, ScriptPolicy, navigate, scroll_down, shell
from agents.policies import GiveUp, Observation


class IdlePolicy(ScriptPolicy):
    observes_page = False

    def unfinished(self) -> str:
        return self.voice.pick(
            "unfinished",
            (
                "I was unable to complete this task.",
                "Sorry, I could not do this.",
                "I did not manage to finish this one.",
                "This task is beyond me, I am afraid.",
            ),
        )

    def script(self, observation: Observation) -> Script:
        task = r.task_of(observation.instruction, observation.start_url)
        if task.kind == "other":
            yield shell("true")
            yield GiveUp(self.unfinished())
            return
        observation = yield navigate(task.url)
        title = str(((observation.last_result or {}).get("data") or {}).get("title") or "")
        yield scroll_down(None, 3)
        if title and self.voice.pick("guess", ("guess", "stop")) == "guess":
            yield GiveUp(
                self.voice.say(
                    "title",
                    (
                        "All I can tell you is that the page is called {title}.",
                        "I only got as far as the page {title}.",
                    ),
                    title=self.voice.quote(title),
                )
            )
            return
        yield GiveUp(self.unfinished())

"""The built-ins' machinery: a policy written as a script (a generator that yields
each action and is sent the observation that followed it), with the fixed tool set's
calls spelled once."""

from collections.abc import Generator
from typing import Any

from agents.builtins.reading import on_screen
from agents.builtins.wording import Voice
from agents.policies import Action, GiveUp, Observation

Script = Generator[Action | GiveUp, Observation, None]


class ScriptPolicy:
    """Runs ``script`` one action per step. A script that ends without delivering
    gives up with ``self.unfinished()``; one step before the step budget runs out it is
    cut short and delivers what ``self.answer_so_far`` holds."""

    observes_page = True

    def __init__(self) -> None:
        self._script: Script | None = None
        self.voice = Voice("")
        self.answer_so_far = ""
        # The newest page as text (None before any, or for a policy that does not read).
        self.page: dict[str, Any] | None = None
        # The submitter's follow-ups received so far (docs/conversations.md).
        self.follow_ups: list[str] = []

    def script(self, observation: Observation) -> Script:
        raise NotImplementedError
        yield  # pragma: no cover

    def unfinished(self) -> str:
        return self.voice.pick("unfinished", ("I could not finish this.", "I have to stop here."))

    def next_action(self, observation: Observation) -> Action | GiveUp:
        self.follow_ups += [message.text for message in observation.messages]
        return self.answering(self._next_action(observation))

    # -- follow-ups: the final message answers them ------------------------------------

    def answering(self, decision: Action | GiveUp) -> Action | GiveUp:
        """``decision`` with its final message (a delivery's or a give-up's) answering
        the follow-ups received, so the submitter sees they arrived."""
        if not self.follow_ups:
            return decision
        if isinstance(decision, GiveUp):
            return GiveUp(self.acknowledged(decision.message))
        if decision.tool == "deliver" and isinstance(decision.args, dict):
            message = str(decision.args.get("message", ""))
            return Action("deliver", {**decision.args, "message": self.acknowledged(message)})
        return decision

    def acknowledged(self, message: str) -> str:
        """The message, then a line per follow-up (the newest five, each quoted up to
        200 characters: the message stays within the deliver tool's bound)."""
        notes = [self.follow_up_note(text[:200]) for text in self.follow_ups[-5:]]
        return "\n\n".join([message, *notes]) if message else "\n\n".join(notes)

    def follow_up_note(self, text: str) -> str:
        return self.voice.say(
            "follow_up",
            (
                "You also wrote: {text}. Noted; what I did is above.",
                "Your follow-up {text} reached me; my answer stands as above.",
                "About your message {text}: I took it into account as far as I could.",
            ),
            text=self.voice.quote(text),
        )

    def _next_action(self, observation: Observation) -> Action | GiveUp:
        self.page = observation.page
        if observation.steps_left <= 1 and self._script is not None:
            self._script.close()
            if self.answer_so_far:
                return deliver(self.answer_so_far)
            return GiveUp(self.unfinished())
        try:
            if self._script is None:
                self.voice = Voice(observation.instruction, type(self).__name__)
                self._script = self.script(observation)
                return next(self._script)
            return self._script.send(observation)
        except StopIteration:
            return GiveUp(self.unfinished())


def shell(command: str, timeout_s: int = 10) -> Action:
    return Action("shell", {"command": command, "timeout_s": timeout_s})


def deliver(message: str, files: list[str] | None = None) -> Action:
    return Action("deliver", {"message": message, "files": files or []})


def navigate(url: str) -> Action:
    return Action("navigate", {"url": url})


def click(element: dict[str, Any]) -> Action:
    """A left click at the centre the page reported for ``element`` (on screen)."""
    assert on_screen(element), element
    return Action("click", {"x": element["x"], "y": element["y"]})


def type_text(text: str) -> Action:
    return Action("type", {"text": text})


def key(combo: str) -> Action:
    return Action("key", {"combo": combo})


def scroll_down(page: dict[str, Any] | None, notches: int = 5) -> Action:
    viewport = (page or {}).get("viewport") or {}
    x = int(viewport.get("left", 0)) + int(viewport.get("width", 1280)) // 2
    y = int(viewport.get("top", 0)) + int(viewport.get("height", 700)) // 2
    return Action("scroll", {"x": max(0, x), "y": max(0, y), "dx": 0, "dy": notches})


def stdout(observation: Observation) -> str:
    return str((observation.last_result or {}).get("stdout", "")).strip()

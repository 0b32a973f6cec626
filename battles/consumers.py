"""Live battle and test-drive pages: the panel's HTML, re-rendered by the writer after
every change and relayed here as it is (arena_site/realtime.py); on (re)connect the
consumer sends the current panel, so a page that missed frames re-syncs. Only those who
may see the battle (``access_battle``: its team, its judges, staff) or the drive
(``access_test_drive``: its agent's team, staff) hear it, and only while they may: the
socket closes on log-out, when its user leaves the team, and at the latest at the next
periodic check (``TenantSocket``)."""

from django.http import Http404

from arena_site.realtime import TenantSocket
from battles.drive_presenters import render_test_drive_panel
from battles.presenters import render_battle_panel
from battles.selectors import access_battle, access_test_drive
from battles.services.live import test_drive_group

CLOSE_NOT_FOUND = 4404


class BattleConsumer(TenantSocket):
    close_code = CLOSE_NOT_FOUND

    @property
    def battle_id(self) -> int:
        return self.scope["url_route"]["kwargs"]["battle_id"]

    def data_group(self) -> str:
        return f"battle-{self.battle_id}"

    def may_watch(self, user) -> bool:
        try:
            access_battle(user, self.battle_id)
        except Http404:
            return False
        return True

    def current_state(self) -> str:
        return render_battle_panel(self.battle_id)


class TestDriveConsumer(TenantSocket):
    """A test drive's live page: its panel after every change (queued, running, each
    step, its end), and on (re)connect. Only the agent's team and admins
    (``access_test_drive``) hear it; anyone else gets the socket closed with 4404."""

    __test__ = False  # not a pytest test class, whatever its name says
    close_code = CLOSE_NOT_FOUND

    @property
    def drive_id(self) -> int:
        return self.scope["url_route"]["kwargs"]["drive_id"]

    def data_group(self) -> str:
        return test_drive_group(self.drive_id)

    def may_watch(self, user) -> bool:
        try:
            access_test_drive(user, self.drive_id)
        except Http404:
            return False
        return True

    def current_state(self) -> str:
        return render_test_drive_panel(self.drive_id)

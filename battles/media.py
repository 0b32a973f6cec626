"""Where a run's private media are kept (names in the private storage,
arena_site/media.py): ``screens/run-<id>/step-<n>.png`` and ``deliveries/run-<id>/<name>``;
and their removal when a battle's runs start over."""

from collections.abc import Iterable

from arena_site.media import media_delete_tree


def screenshot_name(run_id: int, index: int) -> str:
    return f"screens/run-{run_id}/step-{index}.png"


def deliveries_prefix(run_id: int) -> str:
    return f"deliveries/run-{run_id}"


def delivery_name(run_id: int, name: str) -> str:
    return f"{deliveries_prefix(run_id)}/{name}"


def run_media_delete(run_ids: Iterable[int]) -> None:
    """Removes the screenshots and deliveries of these runs (a requeued battle's runs
    start again from step 0)."""
    for run_id in run_ids:
        media_delete_tree(f"screens/run-{run_id}")
        media_delete_tree(deliveries_prefix(run_id))

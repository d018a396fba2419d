"""The Airflow plugin of cdclake's "CDC tables" page (:mod:`cdclake_airflow.monitor`).

Airflow finds it in ``[core] plugins_folder`` (the project's ``plugins/``; the local stack sets
``AIRFLOW__CORE__PLUGINS_FOLDER``, :mod:`cdclake_dev.airflow_env`): the api-server mounts the
FastAPI app at ``/cdc`` and the UI lists "CDC tables" in its navigation (an external view shown in
the UI's frame, at ``/plugin/cdc-tables``) and "cdclake docs" in its Docs menu (the project's
README and ``docs/``, rendered by the same app, at ``/plugin/cdclake-docs``).

Every Airflow process loads plugins (scheduler, dag-processor, triggerer, every task), so this
file imports nothing but the plugin base class: the app (FastAPI, Airflow's API security, the
status code) is built on the first request to ``/cdc``, in the api-server only. Its ``on_load``
gives jsonschema the replay Params' formats (light: :mod:`cdclake.model.replay`), which the
api-server checks the trigger form by.
"""

from __future__ import annotations

from typing import Any

from airflow.plugins_manager import AirflowPlugin

URL_PREFIX = "/cdc"


def _icon(color: str) -> str:
    """A bar chart in ``color`` as a data URI (the nav entry's icon: nothing is fetched from elsewhere)."""
    return (
        "data:image/svg+xml;utf8,"
        f"<svg xmlns='http://www.w3.org/2000/svg' viewBox='0 0 24 24' fill='none' stroke='{color.replace('#', '%23')}' "
        "stroke-width='2' stroke-linecap='round'><path d='M4 20h16M7 16v-5M12 16V6M17 16v-8'/></svg>"
    )


class MonitorApp:
    """An ASGI app that builds :func:`cdclake_airflow.monitor.create_app` on its first request and
    hands every request to it."""

    def __init__(self) -> None:
        self._app: Any = None

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if self._app is None:
            from cdclake_airflow.monitor import create_app

            self._app = create_app()
        await self._app(scope, receive, send)


class CdcLakeMonitorPlugin(AirflowPlugin):
    """``/cdc/`` (the page), ``/cdc/api/tables`` (its JSON), the nav entry "CDC tables" and the
    Docs menu's "cdclake docs" (``/cdc/README.md``)."""

    name = "cdclake_monitor"
    fastapi_apps = [{"app": MonitorApp(), "url_prefix": URL_PREFIX, "name": "CDC tables"}]
    external_views = [
        {
            "name": "CDC tables",
            "href": URL_PREFIX.lstrip("/") + "/",  # relative to the UI's base URL
            "url_route": "cdc-tables",
            "destination": "nav",
            "nav_top_level": True,  # a button of its own in the nav bar, not an item of the Plugins menu
            "icon": _icon("#718096"),
            "icon_dark_mode": _icon("#cbd5e0"),
        },
        {
            "name": "cdclake docs",
            "href": URL_PREFIX.lstrip("/") + "/README.md",  # the project's docs, served by the app
            "url_route": "cdclake-docs",
            "destination": "nav",
            "category": "docs",  # an item of the UI's Docs menu
        },
    ]

    @classmethod
    def on_load(cls, *args: Any, **kwargs: Any) -> None:
        """In every process that loads plugins, among them the api-server, which checks the trigger
        form's Params: the replay Params' formats (:func:`cdclake_airflow.params.register_param_formats`)."""
        from cdclake_airflow.params import register_param_formats

        register_param_formats()

"""Entry point of the test authorization server's subprocess (see :mod:`tests.oauth_as`).

``python -m tests.oauth_as.serve`` with the environment of :mod:`tests.oauth_as.settings` plus
``OAUTH_AS_FD`` (a listening TCP socket inherited from the parent), ``OAUTH_AS_RS_CLIENT_ID`` /
``OAUTH_AS_RS_CLIENT_SECRET`` (the MCP server's introspection client) and ``OAUTH_AS_USERS``
(JSON ``{"username": "password"}``): migrates the SQLite file, creates the users and the
introspection client, then serves Django's ASGI app under uvicorn until terminated.
"""

from __future__ import annotations

import asyncio
import json
import os
import socket


def seed() -> None:
    from django.contrib.auth import get_user_model
    from oauth2_provider.models import get_application_model

    User = get_user_model()
    for username, password in json.loads(os.environ.get("OAUTH_AS_USERS", "{}")).items():
        User.objects.create_user(username=username, password=password)
    get_application_model().objects.create(
        name="MCP resource server (introspection)", client_id=os.environ["OAUTH_AS_RS_CLIENT_ID"],
        client_secret=os.environ["OAUTH_AS_RS_CLIENT_SECRET"], client_type="confidential",
        authorization_grant_type="client-credentials", redirect_uris="", algorithm="")


def main() -> None:
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "tests.oauth_as.settings")
    import django

    django.setup()
    from django.core.management import call_command

    call_command("migrate", verbosity=0, interactive=False)
    seed()
    import uvicorn
    from django.core.asgi import get_asgi_application

    sock = socket.socket(fileno=int(os.environ["OAUTH_AS_FD"]))
    config = uvicorn.Config(get_asgi_application(), lifespan="off", log_level="warning", access_log=False,
                            timeout_graceful_shutdown=2)
    asyncio.run(uvicorn.Server(config).serve(sockets=[sock]))


if __name__ == "__main__":
    main()

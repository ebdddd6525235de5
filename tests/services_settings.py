"""The standalone site's settings with real services, for running the in-process suite a second
time against PostgreSQL and Redis (``./dev test`` does):

    DJANGO_SETTINGS_MODULE=tests.services_settings pytest -m "not browser and not services"

Redis databases 13 (cache, emptied of the process's own keys by the tests) and 14 (channel layer) are used; the test
database is created on 127.0.0.1:5432 and dropped afterwards. Under pytest-xdist each worker has
its own: worker ``gwN`` uses the Redis databases of :data:`REDIS_DBS` and the database
``test_mrtrweb_services_<checkout>_gwN`` (the checkout's path digest, then pytest-django's
suffix). No other test uses those Redis databases (the bench uses 12, tests/topology.py 0,
test_checks and test_secret_keys 5 and 9), and a second checkout running this suite on the same
Redis at once shares those numbers: so the tests empty only their own process's keys
(``tests/caches.py``), never the database.
"""

import hashlib
import os
from pathlib import Path

from mrtrweb.site.settings import *  # noqa: F401,F403

_PG = os.environ.get("MRTRWEB_TEST_PG_HOST", "127.0.0.1")
_REDIS = os.environ.get("MRTRWEB_TEST_REDIS_HOST", "127.0.0.1")
#: the checkout's own tag (8 hex digits of its path's SHA-256): its PostgreSQL test database's name
_CHECKOUT = hashlib.sha256(str(Path(__file__).resolve().parents[1]).encode()).hexdigest()[:8]
_WORKER = int(os.environ.get("PYTEST_XDIST_WORKER", "gw0").removeprefix("gw") or 0)
#: xdist worker number -> (cache database, channel layer database) on the machine's Redis
REDIS_DBS = {0: (13, 14), 1: (11, 10), 2: (8, 7), 3: (6, 4)}
if _WORKER not in REDIS_DBS:
    raise RuntimeError("tests.services_settings has Redis databases for at most 4 pytest-xdist workers (-n 4)")
_CACHE_DB, _LAYER_DB = REDIS_DBS[_WORKER]

DATABASES = {
    "default": {
        "ENGINE": "django.db.backends.postgresql",
        "HOST": _PG,
        "PORT": 5432,
        "USER": "postgres",
        "NAME": "mrtrweb",
        # A name fixed per checkout: a connection left open by a worker thread can keep
        # pytest-django from dropping it at the end; the checkout's next run then drops and
        # recreates it. Two checkouts never share one (their runs would drop or flush each other's
        # rows mid-test): the name carries a digest of the checkout's path.
        # MRTRWEB_TEST_PG_NAME names it outright.
        "TEST": {"NAME": os.environ.get("MRTRWEB_TEST_PG_NAME", f"test_mrtrweb_services_{_CHECKOUT}")},
    }
}
CACHES = {
    "default": {
        "BACKEND": "django_redis.cache.RedisCache",
        "LOCATION": f"redis://{_REDIS}:6379/{_CACHE_DB}",
        "KEY_PREFIX": f"mrtrweb-test-{os.getpid()}",
        "OPTIONS": {"SOCKET_CONNECT_TIMEOUT": 2, "SOCKET_TIMEOUT": 2},
    }
}
CHANNEL_LAYERS = {
    "default": {
        "BACKEND": "channels_redis.core.RedisChannelLayer",
        # a socket timeout above the layer's 5 s blocking receive (mrtrweb.W014)
        "CONFIG": {"hosts": [{"address": f"redis://{_REDIS}:6379/{_LAYER_DB}", "socket_timeout": 30}],
                   "prefix": f"mrtrweb-test-{os.getpid()}"},
    }
}

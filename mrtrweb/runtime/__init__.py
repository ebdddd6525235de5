"""The worker process and its services: what keeps a worker alive and honest.

* :mod:`.workers`, :mod:`.leases` -- each worker's lease and the reaper that judges a worker dead.
* :mod:`.drain` -- the ASGI lifespan: lease and heartbeat at start-up, graceful drain on SIGTERM.
* :mod:`.health` -- liveness and readiness endpoints; :mod:`.metrics`, :mod:`.metrics_view` the
  Prometheus metrics and their endpoint.
* :mod:`.outage` -- which exceptions are an outage, refusing and logging them.
* :mod:`.push` -- pushes over the channel layer that never raise.
* :mod:`.gates` -- the process's one gate over the configured binding store.
* :mod:`.handover` -- the hand-over of a legacy round between workers.
* :mod:`.gcpolicy`, :mod:`.onehop` -- the collector policy and the one-hop ASGI handler.
* :mod:`.logsafe`, :mod:`.secretkeys`, :mod:`.serving_checks`, :mod:`.syncbridge` -- secrets kept
  out of logs, secret keys, checks of how a project serves mrtrweb, coroutines from sync code.
* :mod:`.proxy_pages` -- the static pages the proxy shows when no worker answers.

May import: gate, mcp, bindings, models, conf, authz (keys); :mod:`.drain` (and :mod:`.health`,
which asks it) also operations and servers.
"""

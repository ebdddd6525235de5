"""The per-user WebSocket: operation updates pushed as server-rendered HTML.

* :mod:`.consumers` -- the consumer (``/ws/mrtrweb/``); :mod:`.pending_watch` its "Waiting for
  you" part; :mod:`.resource_watch` a read resource's page following the resource;
  :mod:`.sessions` a socket lives only as long as its sign-in session;
  :mod:`.languages` the language of its pushes; :mod:`.layerwatch` a restarted channel layer
  closes it; :mod:`.origin` the full origin check in front of it; :mod:`.server_log` a server's
  log messages during a call (``operation.log``); :mod:`.csrf` the masked CSRF token of a pushed panel's forms.

Sending a push (never raising) is :mod:`mrtrweb.runtime.push`, used from below.

Top of the layers: may import anything of the product except views and management; nothing of the
product imports it but :mod:`mrtrweb.routing` and :mod:`mrtrweb.asgi`.
"""

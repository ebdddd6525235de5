"""Django's sync-style middleware in one thread hop per request phase, not one per middleware.

Under ASGI every ``MiddlewareMixin`` middleware (Django's own, django-csp's) runs its
``process_request`` and its ``process_response`` each in a ``sync_to_async`` hop onto the one
thread that sync code shares: the seven of the standard stack cost 14 hops per request (counted by
``tests/views/test_web_path_counts.py``), each queued behind every other request's.

:class:`OneHopASGIHandler` (made by :func:`get_asgi_application`, used by
:mod:`mrtrweb.site.asgi`) loads ``MIDDLEWARE`` as Django does, but each run of consecutive
batchable entries (:func:`batchable`: a ``MiddlewareMixin`` with no ``process_exception`` or
``process_template_response`` hook and Django's own ``__call__``) becomes one
:class:`BatchedMiddleware`: the same middleware, in the same order, with the same semantics -- a
``process_request`` that answers skips the inner ones and the view, and that middleware's and the
outer ones' ``process_response`` still run; an exception in one is turned into its response
exactly where Django's ``convert_exception_to_response`` turns it, and the outer ones process
that response -- in one hop on the way in and one on the way out. Their ``process_view`` (CSRF)
runs in one hop too (Django adapts it). ``settings.MIDDLEWARE`` itself is unchanged (the system
checks and embedding projects read it).

The batch also makes ``request.auser()`` load the session and the user in one hop (Django's takes
two, one per query) and share the result with ``request.user``, so a template reading ``user``
does not load them again.
"""


from __future__ import annotations

from typing import Any, Callable

from asgiref.sync import iscoroutinefunction, markcoroutinefunction, sync_to_async
from django.core.exceptions import ImproperlyConfigured, MiddlewareNotUsed
from django.core.handlers.asgi import ASGIHandler
from django.core.handlers.exception import response_for_exception
from django.http import HttpRequest, HttpResponseBase
from django.utils.deprecation import MiddlewareMixin
from django.utils.module_loading import import_string

def _never_called(request: HttpRequest) -> None:  # the members' get_response: the batch calls the inner handler
    raise AssertionError("a batched middleware called its get_response")


class BatchedMiddleware:
    """The middleware of :attr:`members` (dotted paths), batched (see the module); a subclass per
    batch is made by :func:`batched`."""

    sync_capable = True
    async_capable = True
    members: tuple[str, ...] = ()

    def __init__(self, get_response: Callable[[HttpRequest], Any]) -> None:
        self.get_response = get_response
        self.async_mode = iscoroutinefunction(get_response)
        if self.async_mode:
            markcoroutinefunction(self)
        self.instances: list[Any] = []
        for path in self.members:
            try:
                mw = import_string(path)(_never_called)
            except MiddlewareNotUsed:
                continue
            if not batchable(type(mw)):
                raise ImproperlyConfigured(f"{path} cannot be batched ({__name__}.batchable)")
            self.instances.append(mw)
        self.views = [mw.process_view for mw in self.instances if hasattr(mw, "process_view")]

    def _requests(self, request: HttpRequest) -> tuple[int, HttpResponseBase | None]:
        """Each member's ``process_request`` in order. Returns ``(n, response)``: the members whose
        ``process_response`` runs (``len(instances)`` when the view runs, ``response`` None)."""
        for i, mw in enumerate(self.instances):
            if not hasattr(mw, "process_request"):
                continue
            try:
                response = mw.process_request(request)
            except Exception as exc:  # noqa: BLE001 -- where Django's wrapper of this member turns it into a response
                return i, response_for_exception(request, exc)
            if response is not None:
                return i + 1, response
        return len(self.instances), None

    def _responses(self, request: HttpRequest, response: HttpResponseBase, n: int) -> HttpResponseBase:
        """``process_response`` of the first ``n`` members, innermost first."""
        for mw in reversed(self.instances[:n]):
            if not hasattr(mw, "process_response"):
                continue
            try:
                response = mw.process_response(request, response)
            except Exception as exc:  # noqa: BLE001 -- as Django's wrapper of this member does
                response = response_for_exception(request, exc)
        return response

    def process_view(self, request: HttpRequest, view: Any, args: Any, kwargs: Any) -> HttpResponseBase | None:
        for hook in self.views:
            response = hook(request, view, args, kwargs)
            if response is not None:
                return response
        return None

    def __call__(self, request: HttpRequest) -> Any:
        if self.async_mode:
            return self.__acall__(request)
        n, response = self._requests(request)
        if response is None:
            response = self.get_response(request)
        return self._responses(request, response, n)

    async def __acall__(self, request: HttpRequest) -> HttpResponseBase:
        n, response = await sync_to_async(self._requests, thread_sensitive=True)(request)
        if response is None:
            _one_hop_auser(request)
            response = await self.get_response(request)
        return await sync_to_async(self._responses, thread_sensitive=True)(request, response, n)


def _one_hop_auser(request: HttpRequest) -> None:
    """Replace the ``request.auser`` AuthenticationMiddleware set by one that loads the session
    and the user in one thread hop, cached where ``request.user`` finds it (Django's
    ``get_user(request)`` caches ``request._cached_user``)."""
    if not hasattr(request, "auser"):
        return
    from django.contrib.auth.middleware import get_user

    async def auser() -> Any:
        if not hasattr(request, "_acached_user"):
            request._acached_user = await sync_to_async(get_user, thread_sensitive=True)(request)
        return request._acached_user

    request.auser = auser


def batchable(cls: type) -> bool:
    """Whether a middleware class can join a batch: a ``MiddlewareMixin`` (Django runs its hooks
    in thread hops) with its own ``process_request`` or ``process_response``, Django's
    ``__call__``, and no ``process_exception`` or ``process_template_response`` hook (those
    run elsewhere in Django's handler)."""
    return (isinstance(cls, type) and issubclass(cls, MiddlewareMixin)
            and cls.__call__ is MiddlewareMixin.__call__ and cls.__acall__ is MiddlewareMixin.__acall__
            and (hasattr(cls, "process_request") or hasattr(cls, "process_response"))
            and not hasattr(cls, "process_exception") and not hasattr(cls, "process_template_response"))


#: the batch classes made so far, by their members (importable by name: Django imports paths)
_batches: dict[tuple[str, ...], str] = {}


def batched(middleware: list[str]) -> list[str]:
    """``middleware`` (dotted paths, ``MIDDLEWARE`` order) with each run of two or more
    consecutive :func:`batchable` entries replaced by the path of one :class:`BatchedMiddleware`."""
    out: list[str] = []
    run: list[str] = []

    def flush() -> None:
        if len(run) >= 2:
            key = tuple(run)
            if key not in _batches:
                name = f"Batch{len(_batches)}"
                globals()[name] = type(name, (BatchedMiddleware,), {"members": key, "__module__": __name__})
                _batches[key] = f"{__name__}.{name}"
            out.append(_batches[key])
        else:
            out.extend(run)
        run.clear()

    for path in middleware:
        if batchable(import_string(path)):
            run.append(path)
        else:
            flush()
            out.append(path)
    flush()
    return out


class OneHopMixin:
    """For a Django request handler: load ``MIDDLEWARE`` with its batchable runs batched
    (:func:`batched`); ``settings.MIDDLEWARE`` is read as it is and left as it was."""

    def load_middleware(self, is_async: bool = False) -> None:
        from django.conf import settings

        listed = settings.MIDDLEWARE
        settings.MIDDLEWARE = batched(list(listed))
        try:
            super().load_middleware(is_async)  # type: ignore[misc]
        finally:
            settings.MIDDLEWARE = listed


class OneHopASGIHandler(OneHopMixin, ASGIHandler):
    """Django's ASGI handler with its sync-style middleware batched (see the module)."""


def get_asgi_application() -> OneHopASGIHandler:
    """As ``django.core.asgi.get_asgi_application``: set Django up, return the handler."""
    import django

    django.setup(set_prefix=False)
    return OneHopASGIHandler()

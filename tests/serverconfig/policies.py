"""Policies of the server-configuration tests (public names): servers on loopback allowed."""

from __future__ import annotations

import ipaddress

from mrtrweb.mcp.outbound import OutboundPolicy
from mrtrweb.mcp.url_policy import UrlPolicy

LOOPBACK = UrlPolicy(allow_http_hosts=frozenset({"127.0.0.1"}), allow_networks=(ipaddress.ip_network("127.0.0.0/8"),),
                     timeout_s=3.0)
OUTBOUND = OutboundPolicy(allow_http_loopback=True, timeout_s=3.0)

"""A model in the loop (issue 32), against the scripted OpenAI-compatible endpoint
(``model_server.py``, a real HTTP server on loopback, driven through the ``openai`` SDK) and the
real demo MCP server: the provider (streaming, tool calls, errors, bounds, outbound rules:
``test_provider_openai``), turns and decisions through the views (proposals, policy, hostile calls,
failures, restarts, push-followed calls, audit: ``test_turns``), pushes over the WebSocket
(``test_chat_socket``), the tenant's model and policy form (``test_tenant_model``), sampling drafted by
the model (``test_sampling_model``), apps' offers (``test_app_offers``), and Chromium
(``test_chat_browser``)."""

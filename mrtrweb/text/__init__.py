"""What a server or the product says, made safe and bounded to show.

* :mod:`.display` -- invisible and reordering characters made visible.
* :mod:`.names` -- names a server chooses (tools, prompts), safe to link and to look up again.
* :mod:`.stored_text` -- the product's messages stored in English, translated when shown.
* :mod:`.results` -- bounded results: what is stored, shown and downloaded.

Low in the layers: models, operations and pages all use it. May import: conf, :mod:`mrtrweb.mcp`
(protocol constants); never models or anything above.
"""

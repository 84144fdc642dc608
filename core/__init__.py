"""The foundation every app stands on; it imports no app of ours.

The domain's error family, the async database helpers, text and input
validation, the Redis helpers, the request/run thread pools, the DRF kit
(parsers, renderer, the one exception handler) and the console's admin site.
No models: a layer test (``tests/test_layers.py``) keeps every import here
pointing outside the project or inside this package.
"""

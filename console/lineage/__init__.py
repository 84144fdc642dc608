"""Reads behind the console's checkpoint pages: lineage lanes, previews, state diffs, storage totals and guidance.

Everything here reads checkpoint *metadata* in bulk SQL (``checkpoints.storage``)
or materializes exactly the checkpoints a person opened (through the accessor);
the pages that show them are ``console.checkpoints`` and ``console.retention``.
"""

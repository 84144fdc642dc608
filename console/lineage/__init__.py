"""Reads behind the console's checkpoint pages: lineage lanes, state diffs, storage totals.

Everything here reads checkpoint *metadata* in bulk SQL (``checkpoints.storage``)
or materializes exactly the checkpoints a person opened (through the accessor);
the pages that show them are ``console.checkpoints`` and ``console.retention``.
"""

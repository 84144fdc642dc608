"""Reads behind the support console's checkpoint pages: lineage lanes, state diffs, storage totals.

Everything here reads checkpoint *metadata* in bulk SQL (``checkpoints.storage``)
or materializes exactly the checkpoints a person opened (through the accessor);
the admin views that show them live with the thread records (``threads.console``).
"""

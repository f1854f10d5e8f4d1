"""The deterministic demo archive (``ctxlake demo``): ``archive.write_demo_archive`` writes every
transcript format for a given size and seed, byte-identical across runs.
"""

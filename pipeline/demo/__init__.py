"""The deterministic demo archive (``ctxlake demo``): ``archive.write_demo_archive`` writes every
transcript format for a given size and seed, byte-identical across runs. ``context`` holds what
every writer is given (random source, clock, budget, output folder), ``content`` and
``projects`` the shared text, ``usage`` the token meter, and one module per format writes it.
"""

"""Run any engine under the reference kernels, with a census of every op it calls.

``pytest-invariance launch [--census FILE] -- CMD ...`` starts ``CMD`` with ``enable()`` active
in every Python process of its tree, and ``pytest-invariance census FILE`` prints what ran where.
Importing this package imports nothing heavy; torch loads in the engine's process only.

- ``command``: the launcher (starts the command, forwards signals, merges the census);
- ``boot``: the ``sitecustomize`` folder put on the command's ``PYTHONPATH``;
- ``hook``: activation inside each engine process (also the ``vllm.general_plugins`` entry point);
- ``recorder``: the per-thread dispatch mode that counts op calls;
- ``classify``: reference / declined / exact / unrouted, and the family an op maps to;
- ``census_file``: the per-process parts on disk and their merge;
- ``report``: the ``census`` subcommand's matrix.
"""

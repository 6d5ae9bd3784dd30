"""Where a model comes from: ``source`` (``ModelSource``: a seeded preset or a diffusers Wan
2.1 pipeline folder, one value every layout, the serving system and the toy accept) ·
``folder`` (validate and load a folder, never download) · ``text`` (umT5 prompt embeddings) ·
``solver`` (the folder's scheduler as the ``Denoiser``'s update, its memory a value a handoff
can carry) · ``tiny`` (a random 2.5 MB folder for tests and CPU lessons)."""

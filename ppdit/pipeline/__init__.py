"""A local diffusers Wan 2.1 text-to-video pipeline folder, run by ppdit.

``tiny`` (a random 2.5 MB folder for tests and CPU demos) · ``load`` (validate and load, never
download) · ``encode`` (umT5 prompt embeddings, once) · ``solver`` (the folder's scheduler as the
``Denoiser``'s update; its state made a value a handoff can carry) · ``denoise`` (WanPipeline's
loop on the Denoiser) · ``spec`` (the request and its rules) · ``generate`` (one device, VAE
decode) · ``ranks`` (every layout). Its files (MP4 / GIF, frame strip)
are written by ``ppdit.viz.artifacts``.
"""

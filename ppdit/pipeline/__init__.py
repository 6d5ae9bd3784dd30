"""A local diffusers Wan 2.1 text-to-video pipeline folder, run by ppdit: ``tiny`` (a random
folder for tests), ``load`` (validate and load), ``encode`` (prompts), ``solver`` (the folder's
scheduler as the Denoiser's update), ``generate`` (prompt -> video on one device or any layout).
"""

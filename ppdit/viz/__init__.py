"""Every picture ppdit draws, and nothing a lesson computes with: ``timeline`` (ranks over time,
busy bars, counters), ``schedules`` (pipeline schedules and their explorer), ``roofline``,
``tensor`` (the TP split and its costs), ``vae``, and ``artifacts`` (the files a job writes)."""

"""The bring-up system: a rank-0 controller and a generator mesh (PP0 -> PP1)."""

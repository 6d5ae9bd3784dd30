"""Decode overlapped with generation: ``plan``, ``ranks`` (generator and decoder), ``run``.

Why its order is safe under NCCL: chunks and credits each travel on a communicator of their own
(``runtime.comm.mesh.Lanes``, one per direction), so the decoder's chunk receives posted ahead never
stand in front of a credit the generator waits for."""

/* MKL picks its code path by CPU vendor; on a non-Intel CPU it takes a path whose GEMM sums do
 * not depend on the thread count, so a thread mismatch between a result and its reference goes
 * unseen there (issue 49). Preloaded by scripts/load_lane.sh, this makes MKL take the Intel path
 * the CPUs of most users and CI runners take. */
int mkl_serv_intel_cpu_true(void) { return 1; }

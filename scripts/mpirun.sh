#!/usr/bin/env bash
# mpirun for attn's tests and benchmarks: N ranks on this machine over loopback/shared memory,
# oversubscribed when N exceeds the cores, allowed as root (CI runs as root), and bounded in
# time (--timeout; ATTN_MPIRUN_TIMEOUT seconds, default 300) so that a hung job ends.
#   scripts/mpirun.sh N PROGRAM [ARGS...]
set -euo pipefail
np="$1"
shift
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
# No InfiniBand/UCX probing on a laptop or CI machine: shared memory and TCP on loopback only.
export OMPI_MCA_btl="self,vader,tcp" OMPI_MCA_btl_tcp_if_include=lo OMPI_MCA_oob_tcp_if_include=lo
export OMPI_MCA_pml=ob1 OMPI_MCA_btl_vader_single_copy_mechanism=none
exec mpirun --oversubscribe --bind-to none --timeout "${ATTN_MPIRUN_TIMEOUT:-300}" -np "$np" "$@"

# Sourced by the test scripts: the wall time of each phase of a script.
#   phase_done NAME   appends "NAME Ns" (seconds since the previous phase ended, or since this
#                     file was sourced) to the array `timings`
phase_start=$SECONDS
timings=()
phase_done() {
  timings+=("$1 $((SECONDS - phase_start))s")
  phase_start=$SECONDS
}

# Runs one libFuzzer target for ctest (see fuzz/CMakeLists.txt):
#   cmake -DFUZZER=exe -DMODE=fuzz|regressions -DCORPUS=dir -DWORK=dir [-DSECONDS=n]
#         [-DRSS_LIMIT_MB=n] [-DDICT=file.dict] -P run_fuzzer.cmake
# MODE=fuzz: fuzzes for SECONDS with a fixed seed, starting from CORPUS (read-only: libFuzzer writes
# new inputs into the first corpus directory, which is the scratch directory WORK/new). MODE=
# regressions: runs every file in CORPUS once. Crash inputs are written to WORK/ (crash-*, leak-*,
# timeout-*, oom-*); the test fails on any of them and names them.
foreach(v FUZZER MODE CORPUS WORK)
  if(NOT DEFINED ${v})
    message(FATAL_ERROR "run_fuzzer.cmake: -D${v}=... is required")
  endif()
endforeach()
if(NOT DEFINED RSS_LIMIT_MB)
  set(RSS_LIMIT_MB 2048)
endif()

file(REMOVE_RECURSE ${WORK})
file(MAKE_DIRECTORY ${WORK}/new)
# One thread each: ctest runs the targets side by side.
set(ENV{OMP_NUM_THREADS} 1)
# fontconfig's font patterns look leaked to LeakSanitizer (scripts/lsan.supp says why).
if(NOT DEFINED ENV{LSAN_OPTIONS})
  set(ENV{LSAN_OPTIONS} suppressions=${CMAKE_CURRENT_LIST_DIR}/../scripts/lsan.supp)
endif()
set(ENV{OPENBLAS_NUM_THREADS} 1)
set(common -rss_limit_mb=${RSS_LIMIT_MB} -malloc_limit_mb=${RSS_LIMIT_MB} -timeout=20
    -artifact_prefix=${WORK}/ -print_final_stats=1)

if(MODE STREQUAL "fuzz")
  if(NOT DEFINED SECONDS)
    set(SECONDS 30)
  endif()
  if(NOT IS_DIRECTORY ${CORPUS})
    message(FATAL_ERROR "run_fuzzer.cmake: no seed corpus ${CORPUS}")
  endif()
  set(dict_arg "")
  if(DEFINED DICT AND EXISTS ${DICT})
    set(dict_arg -dict=${DICT})
  endif()
  set(cmd ${FUZZER} ${common} -seed=1 -max_total_time=${SECONDS} ${dict_arg} ${WORK}/new ${CORPUS})
elseif(MODE STREQUAL "regressions")
  file(GLOB inputs LIST_DIRECTORIES false ${CORPUS}/*)
  list(FILTER inputs EXCLUDE REGEX "/README[^/]*$")
  list(LENGTH inputs n)
  if(n EQUAL 0)
    message(STATUS "no regression inputs in ${CORPUS}")
    return()
  endif()
  message(STATUS "${n} regression inputs from ${CORPUS}")
  set(cmd ${FUZZER} ${common} -runs=1 ${inputs})
else()
  message(FATAL_ERROR "run_fuzzer.cmake: MODE must be fuzz or regressions, got '${MODE}'")
endif()

execute_process(COMMAND ${cmd} RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE out)
file(GLOB artifacts ${WORK}/crash-* ${WORK}/leak-* ${WORK}/timeout-* ${WORK}/oom-*
     ${WORK}/slow-unit-*)
# Sanitizer reports are fatal (abort) in this build, but a report printed by a runtime that was
# told to continue would not change the exit code: look for them as well.
string(REGEX MATCH "(ERROR: (AddressSanitizer|LeakSanitizer|libFuzzer)|runtime error:)[^\n]*"
       report "${out}")
if(NOT rc EQUAL 0 OR artifacts OR report)
  string(LENGTH "${out}" len)
  if(len GREATER 30000)
    math(EXPR start "${len} - 30000")
    string(SUBSTRING "${out}" ${start} -1 out)
    set(out "...\n${out}")
  endif()
  message("${out}")
  message(FATAL_ERROR "${FUZZER} failed (exit code ${rc}) ${report}\n"
          "inputs that fail: ${artifacts}\n"
          "reproduce: ${FUZZER} <input>; minimise: ${FUZZER} -minimize_crash=1 -runs=10000 <input>")
endif()
# The last lines (stats) for the ctest log.
string(REGEX MATCHALL "(#[0-9]+[^\n]*DONE[^\n]*|stat::[^\n]*|Done [0-9]+ runs[^\n]*)" tail "${out}")
foreach(line ${tail})
  message(STATUS "${line}")
endforeach()

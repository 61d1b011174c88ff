# ctest driver: runs a fuzz target for a bounded time over its seed corpus. Fails when
# libFuzzer reports a crash, a leak, a timeout or an allocation over the limit (the
# reproducer is left in WORK/artifacts).
# Inputs: -DFUZZER=<target> -DWORK=<dir> -DSECONDS=<n>, and either -DSEEDER=<program> (writes
# the seeds into WORK/seeds) or -DSEEDS=<checked-in corpus>; optional -DMAX_LEN=<bytes>.
foreach(var FUZZER WORK SECONDS)
  if(NOT DEFINED ${var})
    message(FATAL_ERROR "run_fuzz.cmake needs -D${var}=...")
  endif()
endforeach()
if(NOT EXISTS "${FUZZER}")
  message(FATAL_ERROR "${FUZZER} is not built")
endif()
if(NOT DEFINED MAX_LEN)
  set(MAX_LEN 16384)
endif()
file(MAKE_DIRECTORY "${WORK}/corpus" "${WORK}/artifacts")
if(DEFINED SEEDER)
  file(REMOVE_RECURSE "${WORK}/seeds")
  file(MAKE_DIRECTORY "${WORK}/seeds")
  execute_process(COMMAND "${SEEDER}" "${WORK}/seeds" RESULT_VARIABLE seed_result)
  if(NOT seed_result EQUAL 0)
    message(FATAL_ERROR "writing the seed corpus failed (${seed_result})")
  endif()
  set(SEEDS "${WORK}/seeds")
endif()
# New inputs go to the first directory (kept between runs); the seeds are read only.
execute_process(
  COMMAND "${FUZZER}" -max_total_time=${SECONDS} -timeout=10 -rss_limit_mb=2048
          -malloc_limit_mb=256 -max_len=${MAX_LEN} -print_final_stats=1
          "-artifact_prefix=${WORK}/artifacts/" "${WORK}/corpus" "${SEEDS}"
  RESULT_VARIABLE fuzz_result)
if(NOT fuzz_result EQUAL 0)
  message(FATAL_ERROR "${FUZZER} failed (${fuzz_result}); reproducer in ${WORK}/artifacts")
endif()

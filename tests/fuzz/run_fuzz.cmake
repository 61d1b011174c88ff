# ctest driver: writes the seed corpus with GgufWriter, then runs the GGUF fuzz target for a
# bounded time. Fails when libFuzzer reports a crash, a leak, a timeout or an allocation
# over the limit (the reproducer is left in WORK/artifacts).
# Inputs: -DFUZZER=<gguf_fuzz> -DSEEDER=<gguf_fuzz_seeds> -DWORK=<dir> -DSECONDS=<n>
foreach(var FUZZER SEEDER WORK SECONDS)
  if(NOT DEFINED ${var})
    message(FATAL_ERROR "run_fuzz.cmake needs -D${var}=...")
  endif()
endforeach()
if(NOT EXISTS "${FUZZER}")
  message(FATAL_ERROR "${FUZZER} is not built; build the gguf_fuzz target first")
endif()
file(REMOVE_RECURSE "${WORK}/seeds")
file(MAKE_DIRECTORY "${WORK}/seeds" "${WORK}/corpus" "${WORK}/artifacts")
execute_process(COMMAND "${SEEDER}" "${WORK}/seeds" RESULT_VARIABLE seed_result)
if(NOT seed_result EQUAL 0)
  message(FATAL_ERROR "writing the seed corpus failed (${seed_result})")
endif()
# New inputs go to the first directory (kept between runs); the seeds are read only.
execute_process(
  COMMAND "${FUZZER}" -max_total_time=${SECONDS} -timeout=10 -rss_limit_mb=2048
          -malloc_limit_mb=256 -max_len=16384 -print_final_stats=1
          "-artifact_prefix=${WORK}/artifacts/" "${WORK}/corpus" "${WORK}/seeds"
  RESULT_VARIABLE fuzz_result)
if(NOT fuzz_result EQUAL 0)
  message(FATAL_ERROR "the GGUF fuzzer failed (${fuzz_result}); reproducer in ${WORK}/artifacts")
endif()

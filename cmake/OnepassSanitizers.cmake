# ONEPASS_SANITIZE: a comma-separated list of address, undefined and thread ("address,undefined"
# is scripts/test's ONEPASS_SANITIZE=1 build), applied to every target in the tree.
if(ONEPASS_SANITIZE)
  string(REPLACE "," ";" onepass_san_names "${ONEPASS_SANITIZE}")
  foreach(name IN LISTS onepass_san_names)
    if(NOT name MATCHES "^(address|undefined|thread)$")
      message(FATAL_ERROR "ONEPASS_SANITIZE is a comma-separated list of address, undefined and "
                          "thread (got '${ONEPASS_SANITIZE}')")
    endif()
  endforeach()
  if("thread" IN_LIST onepass_san_names AND "address" IN_LIST onepass_san_names)
    message(FATAL_ERROR "ONEPASS_SANITIZE: thread and address cannot be combined")
  endif()
  # Line tables are enough for the sanitizers' stack traces and build much faster than full
  # debug information.
  if(CMAKE_CXX_COMPILER_ID MATCHES "Clang")
    set(onepass_san_debug -gline-tables-only)
  else()
    set(onepass_san_debug -g1)
  endif()
  set(onepass_san_flags -fsanitize=${ONEPASS_SANITIZE} -fno-omit-frame-pointer ${onepass_san_debug})
  if("undefined" IN_LIST onepass_san_names)
    # Every UBSan report fails the test that triggers it.
    list(APPEND onepass_san_flags -fno-sanitize-recover=undefined)
  endif()
  add_compile_options("$<$<COMPILE_LANGUAGE:C,CXX>:${onepass_san_flags}>")
  add_link_options(${onepass_san_flags})
endif()

# A clang++ build with AddressSanitizer also builds the libFuzzer targets of the whole load
# path (tests/fuzz): the model-file sources get libFuzzer's coverage instrumentation.
set(ONEPASS_FUZZ_LOAD_PATH OFF)
if(CMAKE_CXX_COMPILER_ID MATCHES "Clang" AND "address" IN_LIST onepass_san_names)
  set(ONEPASS_FUZZ_LOAD_PATH ON)
endif()

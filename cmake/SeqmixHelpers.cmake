# Warnings for our own targets (not for third-party headers, which come in as system includes).
function(seqmix_warnings target)
  target_compile_options(${target} PRIVATE -Wall -Wextra -Wpedantic -Wno-unused-parameter)
endfunction()

# seqmix_add_test(name source...): one GoogleTest binary, registered per test case with CTest.
function(seqmix_add_test name)
  add_executable(${name} ${ARGN})
  target_link_libraries(${name} PRIVATE seqmix GTest::gtest GTest::gtest_main)
  target_include_directories(${name} PRIVATE ${PROJECT_SOURCE_DIR}/tests)
  # SEQMIX_PYTHON: the environment's interpreter (its torch is the LibTorch seqmix links), for
  # tests that check what plain PyTorch makes of seqmix's files.
  target_compile_definitions(${name} PRIVATE SEQMIX_SOURCE_DIR="${PROJECT_SOURCE_DIR}"
                             SEQMIX_PYTHON="${SEQMIX_PYTHON}")
  seqmix_warnings(${name})
  target_precompile_headers(${name} REUSE_FROM seqmix)
  gtest_discover_tests(${name} DISCOVERY_TIMEOUT 60
    PROPERTIES ENVIRONMENT "SEQMIX_BIN=$<TARGET_FILE:seqmix_cli>")
endfunction()

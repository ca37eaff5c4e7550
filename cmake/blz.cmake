# Shared compile settings for every blz target.
add_library(blz_options INTERFACE)
target_compile_options(blz_options INTERFACE -Wall -Wextra -Wpedantic -Wshadow
  -Wnon-virtual-dtor -Wno-missing-field-initializers)
# GCC 12 reports impossible overlaps in std::string concatenation when it inlines at -O3
# (-Wrestrict false positive, GCC bug 105329, fixed in GCC 13): silence that one warning there.
if(CMAKE_CXX_COMPILER_ID STREQUAL "GNU" AND CMAKE_CXX_COMPILER_VERSION VERSION_LESS 13)
  target_compile_options(blz_options INTERFACE -Wno-restrict)
endif()
if(BLZ_WERROR)
  target_compile_options(blz_options INTERFACE -Werror)
endif()
if(BLZ_SANITIZE)
  # Every library, the blz binary and the fuzz harnesses get both sanitizers. The test files
  # themselves (targets with BLZ_TEST_CODE set, see blz_test) get ASan only: UBSan's checks
  # would nearly double their compile time (tests/registry/registry_test.cc: 14 s plain, 23 s
  # with ASan, 29-33 s with both), and the test files are half of the build (docs/fuzzing.md,
  # "CI time budget"). They still link UBSan's runtime, so the libraries they call report as
  # anywhere else. ASan cannot be dropped from them too: it defines __SANITIZE_ADDRESS__, which
  # changes header-only code (Eigen's aligned malloc, Memory.h), so a test file without it
  # would free what a library allocated with a different layout (a fresh-clone run of
  # 2026-11-28: every LowRankTest failed so). UBSan defines no macro and changes no layout.
  set(instrumented "$<NOT:$<BOOL:$<TARGET_PROPERTY:BLZ_TEST_CODE>>>")
  target_compile_options(blz_options INTERFACE
    $<IF:${instrumented},-fsanitize=address$<COMMA>undefined,-fsanitize=address>
    -fno-omit-frame-pointer $<${instrumented}:-fno-sanitize-recover=undefined>)
  target_link_options(blz_options INTERFACE -fsanitize=address,undefined)
endif()
if(BLZ_FUZZ)
  # Coverage instrumentation for libFuzzer in every library; the fuzz targets themselves link
  # -fsanitize=fuzzer (fuzz/CMakeLists.txt).
  target_compile_options(blz_options INTERFACE -fsanitize=fuzzer-no-link,address,undefined
    -fno-omit-frame-pointer -fno-sanitize-recover=undefined)
  target_link_options(blz_options INTERFACE -fsanitize=address,undefined)
endif()
# Include paths start at the repository root: #include "core/status.h".
target_include_directories(blz_options INTERFACE ${PROJECT_SOURCE_DIR})

# blz_library(NAME SOURCES... DEPS ...): one static library per layer folder.
function(blz_library name)
  cmake_parse_arguments(ARG "" "" "SOURCES;DEPS" ${ARGN})
  if(ARG_SOURCES)
    add_library(${name} STATIC ${ARG_SOURCES})
    target_link_libraries(${name} PUBLIC blz_options ${ARG_DEPS})
  else()
    add_library(${name} INTERFACE)
    target_link_libraries(${name} INTERFACE blz_options ${ARG_DEPS})
  endif()
endfunction()

# blz_test(NAME SOURCES... DEPS ...): one GoogleTest binary, registered with CTest.
# Tests run from the build directory; BLZ_SOURCE_DIR and BLZ_CORPUS_DIR are compiled in.
# WHOLE_BINARY: one CTest test for the whole binary instead of one per test case, for suites
# whose set-up is expensive (e.g. starting a server once per binary).
function(blz_test name)
  cmake_parse_arguments(ARG "WHOLE_BINARY" "" "SOURCES;DEPS" ${ARGN})
  add_executable(${name} ${ARG_SOURCES})
  # Only ASan of BLZ_SANITIZE for the test's own files (see above); what it links has both.
  set_target_properties(${name} PROPERTIES BLZ_TEST_CODE ON)
  target_link_libraries(${name} PRIVATE blz_options ${ARG_DEPS} GTest::gtest GTest::gtest_main GTest::gmock)
  target_compile_definitions(${name} PRIVATE
    BLZ_SOURCE_DIR="${PROJECT_SOURCE_DIR}"
    BLZ_CORPUS_DIR="${BLZ_CORPUS_DIR}")
  if(ARG_WHOLE_BINARY)
    add_test(NAME ${name} COMMAND ${name})
    set_tests_properties(${name} PROPERTIES TIMEOUT 600)
    return()
  endif()
  include(GoogleTest)
  gtest_discover_tests(${name} DISCOVERY_TIMEOUT 60 PROPERTIES TIMEOUT 600)
endfunction()
